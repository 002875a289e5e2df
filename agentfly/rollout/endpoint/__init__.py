"""An OpenAI-compatible endpoint on agentfly's engines: ``agentfly serve`` (:mod:`agentfly.run.serve`) for any OpenAI client,
and the per-chain endpoints through which ``agent.harness`` trains an agent program token for
token (:mod:`agentfly.rollout.harness`)."""

"""The data side of ``agentfly sft``: examples laid out as the agent loop lays out chains.

Conversations (:mod:`~agentfly.sft.conversations`) and agentfly's rollout records
(:mod:`~agentfly.sft.rollout_records`) become trajectories whose loss mask is 1 exactly on the
assistant's tokens (a conversation's images read and processed by :mod:`~agentfly.sft.row_images`); :mod:`~agentfly.sft.examples` reads the files row by row and names the bad
rows; :mod:`~agentfly.sft.datamodule` draws the batches. The command itself, its plan and its run
are :mod:`agentfly.run.sft` and :mod:`agentfly.run.sft_plan`; its keys :mod:`agentfly.config.sft`.
"""

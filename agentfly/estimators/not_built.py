"""Estimator names AgentFly's scripts use whose math no source agentfly can read holds.

A name here is refused when the config is composed (:mod:`agentfly.config.validate`), with the
reason, instead of being reported as unknown; nothing here is registered, so nothing guesses at
the math.

``sspo_multiturn``: ``search/train_search_r1_ray.sh`` trains with it (a critic, ``gamma=0.99``,
``lam=0.95``, and ``SSPO_MULTITURN_VALUE_POSITION=first_response`` exported), and the
ScienceWorld and SWE scripts name it in comments. Its code is in AgentFly's verl submodule at
commit ``001f000``, which no public branch of Agent-One-Lab/verl (``main``, ``agent``,
``shu-agentfly``) contains; AgentFly itself holds only those scripts. What the variable's
``first_response`` chooses (where a segment's value is read), and how the turns or folded
segments (``segment_idx``, ``batch_idx`` in AgentFly's batch) enter the advantage, are not
recoverable from them.
"""

from __future__ import annotations

NOT_BUILT: dict[str, str] = {
    "sspo_multiturn": (
        "its math is in AgentFly's verl submodule at commit 001f000, which no published "
        "branch of Agent-One-Lab/verl holds, so agentfly cannot build it faithfully (nor "
        "what SSPO_MULTITURN_VALUE_POSITION=first_response selects); use adv_estimator=gae "
        "for a critic-based estimator with the same critic, gamma and lam"
    ),
}
"""Estimator name → why it is refused (what it would need)."""

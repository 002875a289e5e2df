"""What every layer of agentfly shares, importing nothing else of agentfly.

The data types of one iteration (:mod:`~agentfly.core.trajectory`, :mod:`~agentfly.core.batch`),
the registries and plugin loading (:mod:`~agentfly.core.registry`, :mod:`~agentfly.core.plugins`),
the config error (:mod:`~agentfly.core.errors`), masked tensor reductions
(:mod:`~agentfly.core.reductions`), weight gathering (:mod:`~agentfly.core.weights`), validation
sums (:mod:`~agentfly.core.metric_sums`) and process clean-up (:mod:`~agentfly.core.shutdown`,
:mod:`~agentfly.core.reaper`).
"""

"""The loss-aggregation modes (``loss_agg_mode``), listed once; torch-free so the config layer can
check a choice without importing torch. Their definitions are in
:func:`agentfly.modules.losses.agg_loss`."""

LOSS_AGG_MODES = (
    "token-mean",
    "token-sum",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
)

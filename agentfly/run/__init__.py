"""Building and running a job, shared by ``agentfly fit`` and ``agentfly sft``.

- :mod:`~agentfly.run.job`: what every job's plan holds (:class:`~agentfly.run.job.JobPlan`) and
  the ``trainer.*`` keys both stages read the same way.
- :mod:`~agentfly.run.plan`, :mod:`~agentfly.run.module_plan`: ``fit``'s plan, the one reader of
  its config; :mod:`~agentfly.run.sft_plan`: ``sft``'s.
- :mod:`~agentfly.run.topology`: the ranks and engines this machine can run.
- :mod:`~agentfly.run.build`: the one build path from a plan to a Trainer and a run folder that
  ends cleanly; :mod:`~agentfly.run.fit` and :mod:`~agentfly.run.sft` add each stage's module and
  data module and run it.
- :mod:`~agentfly.run.resume`, :mod:`~agentfly.run.checkpoints`: which checkpoint a run resumes
  from and whether its config may; :mod:`~agentfly.run.report`: the end-of-run report.
"""

"""The timer core's seeded simulator (`python -m timers.sim`): producers, a replicated timer log,
replicas' indexes, a leader's TimerBook firing into a model source partition, failovers and
crashes; `checker.TimerChecker` judges every promise of delayed delivery as it runs."""

"""`kiln patch`: rolling upgrades of a live Slurm cluster (plan, journal, rollout, report)."""

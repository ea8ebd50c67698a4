"""kiln usage: GPU-hours, cost and idle allocation per team, user and job, from Slurm's accounting."""

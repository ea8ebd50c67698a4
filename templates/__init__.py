"""kiln's jinja2 templates, one folder per role (templates/slurm/slurm.conf.j2): package data, found
through importlib.resources so an installed kiln renders the same files as a source checkout."""

"""Converge every host with its kiln roles (base, slurm): the plain-pyinfra twin of `kiln deploy`.

    pyinfra deploy/inventory.py deploy/site.py -y

Same roles, same inventory, same files on the nodes. `kiln deploy` adds the OS check of every node
before any change, parallel node snapshots, --limit with Ansible patterns, and a per-host summary.
"""

from pyinfra import host

from kiln.deploy.standalone import converge

converge(host)

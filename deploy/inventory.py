"""The kiln inventory ($KILN_INVENTORY, default inventory/testbed) as a pyinfra inventory file.

    pyinfra deploy/inventory.py deploy/site.py -y

Every group of the Ansible inventory becomes a pyinfra group; each host carries its connection
settings (strict host-key checking against the inventory's known_hosts, always).
"""

from kiln.deploy.standalone import pyinfra_groups

globals().update(pyinfra_groups())

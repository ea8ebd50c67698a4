"""Which ssh_config options kiln uses from an inventory: connection options only."""

from kiln.inventory.ssh_config import unsafe_options


def test_the_testbeds_own_ssh_config_is_safe():
    text = ("Host kiln01 10.213.0.11\n  HostName 10.213.0.11\n  User root\n  IdentityFile /k/id\n  IdentitiesOnly yes\n"
            "  UserKnownHostsFile /k/known_hosts\n  StrictHostKeyChecking yes\n  ControlMaster auto\n"
            "  ControlPath /k/cm-%C\n  ControlPersist 120\n  ConnectTimeout 10\n  LogLevel ERROR\n"
            "# a bastion\nHost gpu*\n  ProxyJump bastion.example.org\n  Port=2222\n")
    assert unsafe_options(text) == []


def test_options_that_run_or_load_code_are_named_with_their_lines():
    text = ("Host *\n  proxycommand nc %h %p\n  LocalCommand id\n  PermitLocalCommand yes\nMatch exec \"true\"\n"
            "Include other\n  KnownHostsCommand /bin/x\n  SecurityKeyProvider /tmp/x.so\n  ???\n")
    assert unsafe_options(text) == [(2, "proxycommand"), (3, "LocalCommand"), (4, "PermitLocalCommand"), (5, "Match"),
                                    (6, "Include"), (7, "KnownHostsCommand"), (8, "SecurityKeyProvider"), (9, "???")]

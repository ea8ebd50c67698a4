"""kiln image and kiln drift on bad input, the image store, cleaning a tree, and the tar output."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from click.testing import CliRunner

from kiln.cli.main import main
from kiln.image import store
from kiln.image.clean import SECRET_FILES, clean
from tests.conftest import INVENTORIES, REPO

EXAMPLE = str(REPO / "inventory" / "example")


@pytest.mark.parametrize("args, message", [
    (["image", "build", "-i", EXAMPLE, "--node-type", "gpu_a100"], "--node-type gpu_a100: not a node type of this "
                                                                   "inventory; it has gpu_h100, gpu_l40s"),
    (["image", "build", "-i", EXAMPLE, "--group", "storage"], "--group storage: no such group with hosts"),
    (["image", "build", "-i", EXAMPLE, "--node-type", "gpu_h100", "--group", "login"], "not both"),
    (["image", "build", "-i", EXAMPLE, "--format", "dir,iso"], "--format iso: give some of dir, tar, qcow2, vagrant-box"),
    (["image", "build", "-i", str(INVENTORIES / "nonexistent")], "inventory directory not found"),
    (["image", "rm", "no-such-image"], "no-such-image: no such image"),
    (["drift", "-i", EXAMPLE, "--image", "no-such-image"], "no image 'no-such-image'"),
    (["drift", "-i", EXAMPLE, "--limit", "hgx999"], "matches no host or group"),
])
def test_bad_input_exits_2_and_builds_or_touches_nothing(no_network, tmp_path, monkeypatch, args, message):
    monkeypatch.setattr(store, "STORE", tmp_path / "store")
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert no_network == [] and not (tmp_path / "store").exists()


def test_plan_prints_the_recipe_of_every_node_type_without_root_or_network(no_network):
    result = CliRunner().invoke(main, ["image", "build", "-i", EXAMPLE, "--plan", "--json"])
    assert result.exit_code == 0, result.output
    plans = json.loads(result.output)
    assert [p["target"] for p in plans] == ["gpu_h100", "gpu_l40s"]
    assert plans[0]["bootstrap"][0].startswith("debootstrap --variant=minbase --components=main,universe")
    assert all("/etc/munge/munge.key" not in {f["path"] for f in p["files"]} for p in plans)


def _image(root, name: str, built: str, target: str = "t") -> store.StoredImage:
    path = root / name
    (path / "rootfs" / "etc").mkdir(parents=True)
    (path / "rootfs" / "etc" / "f").write_text("x" * 100)
    (path / "manifest.json").write_text(json.dumps({"name": name, "built": built, "target": target}))
    return store.StoredImage(path)


def test_the_store_lists_finds_by_prefix_and_ignores_half_builds(tmp_path):
    _image(tmp_path, "c-t-aaaa", "2026-11-30T10:00:00+00:00")
    _image(tmp_path, "c-t-bbbb", "2026-11-30T11:00:00+00:00")
    (tmp_path / "c-t-cccc.tmp" / "rootfs").mkdir(parents=True)
    assert [i.name for i in store.images(tmp_path)] == ["c-t-aaaa", "c-t-bbbb"]
    assert store.find("c-t", tmp_path).name == "c-t-bbbb"      # the newest of that target
    assert store.find("c-t-aaaa", tmp_path).name == "c-t-aaaa"
    assert store.stale_builds(tmp_path) == [tmp_path / "c-t-cccc.tmp"]
    with pytest.raises(store.ImageNotFound, match="there are: c-t-aaaa, c-t-bbbb"):
        store.find("other", tmp_path)
    assert store.find("c-t-aaaa", tmp_path).size("dir") == 100


def test_clean_removes_identity_caches_logs_and_secrets(tmp_path):
    root = tmp_path / "rootfs"
    made = ["etc/ssh/ssh_host_ed25519_key", "etc/ssh/ssh_host_ed25519_key.pub", "var/cache/apt/pkgcache.bin",
            "var/cache/apt/archives/slurmd_22.05_amd64.deb", "var/lib/apt/lists/deb.debian.org_dists_bookworm_InRelease",
            "var/log/apt/history.log", "var/log/dpkg.log", "root/.bash_history", "tmp/x", "usr/sbin/policy-rc.d",
            "etc/apt/apt.conf.d/00kiln-image-build-proxy", "etc/resolv.conf", *SECRET_FILES]
    kept = ["etc/ssh/sshd_config", "var/lib/apt/lists/lock", "etc/apt/apt.conf.d/90kiln", "usr/sbin/slurmd"]
    for rel in made + kept:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("data")
    (root / "etc" / "machine-id").write_text("0123456789abcdef0123456789abcdef\n")
    clean(root)
    assert [rel for rel in made if (root / rel).exists()] == []
    assert all((root / rel).exists() for rel in kept) and (root / "var" / "log" / "apt").is_dir()
    assert (root / "etc" / "machine-id").read_text() == ""


@pytest.mark.skipif(shutil.which("zstd") is None, reason="zstd is not installed (apt-get install zstd)")
def test_the_tar_output_keeps_owners_modes_and_links(tmp_path):
    from kiln.image.outputs import write_tar
    image = _image(tmp_path, "c-t-aaaa", "2026-11-30T10:00:00+00:00")
    secret = image.rootfs / "etc" / "shadow"
    secret.write_text("root:*:1::::::\n")
    secret.chmod(0o640)
    (image.rootfs / "etc" / "link").symlink_to("f")
    write_tar(image)
    listing = subprocess.run(f"zstd -dc {image.path / 'image.tar.zst'} | tar -tv --numeric-owner", shell=True,
                             capture_output=True, text=True, check=True).stdout
    assert "-rw-r----- 0/0" in next(line for line in listing.splitlines() if line.endswith("./etc/shadow"))
    assert "./etc/link -> f" in listing
    assert image.formats == ["dir", "tar"]


def test_a_group_name_that_is_a_path_never_names_an_image():
    """Ansible keeps group names such as 'gpu/../../x' (with a warning); the image, a directory of the
    store, refuses them: by node type and by --group alike."""
    from dataclasses import replace

    from kiln.image.recipe import RecipeError, recipe, select
    from kiln.inventory import load_cluster
    cluster = load_cluster(INVENTORIES / "plan")
    evil = "gpu/../../../tmp/evil"
    bad = replace(cluster, node_types={evil: replace(cluster.node_types["gpu"], name=evil)},
                  groups={**cluster.groups, evil: cluster.groups["gpu"]})
    for target in select(bad) + select(bad, group=evil):
        with pytest.raises(RecipeError, match="must be a plain name"):
            recipe(bad, target)
    assert recipe(cluster, "gpu").name.startswith("plan-gpu-")


def _built(root, name: str, built: str, target: str = "compute", os: str = "debian12", cluster: str = "c"):
    image = _image(root, name, built, target)
    manifest = {**image.manifest, "os": os, "cluster": cluster}
    (image.path / "manifest.json").write_text(json.dumps(manifest))
    return image


def test_prune_keeps_the_newest_of_each_cluster_target_and_os_and_what_a_testbed_boots(tmp_path, monkeypatch):
    root = tmp_path / "store"
    for hour, name in enumerate(["c-compute-a1", "c-compute-a2", "c-compute-a3", "c-compute-a4"]):
        _built(root, name, f"2026-11-30T1{hour}:00:00+00:00")
    _built(root, "c-compute-d13", "2026-11-30T09:00:00+00:00", os="debian13")       # another OS: its own newest
    _built(root, "c-controller-b1", "2026-11-30T09:00:00+00:00", target="controller")
    _built(root, "other-compute-x1", "2026-11-30T08:00:00+00:00", cluster="other")  # another cluster
    found = store.images(root)
    assert [i.name for i in store.prunable(found, 2, set())] == ["c-compute-a1", "c-compute-a2"]
    assert [i.name for i in store.prunable(found, 1, {"c-compute-a1"})] == ["c-compute-a2", "c-compute-a3"]
    # the command: a stopped testbed's record keeps its image; the rest goes, the newest two stay
    state = tmp_path / "testbeds"
    (state / "tb1").mkdir(parents=True)
    (state / "tb1" / "testbed.json").write_text(json.dumps({"nodes": [{"name": "tb101", "image": "c-compute-a1"},
                                                                        {"name": "tb102", "image": None}]}))
    monkeypatch.setattr(store, "STORE", root)
    from kiln.testbed import testbed
    monkeypatch.setattr(testbed, "STATE_ROOT", state)
    dry = CliRunner().invoke(main, ["image", "prune", "--dry-run"])
    assert dry.exit_code == 0 and "would remove c-compute-a2" in dry.output, dry.output
    assert len(store.images(root)) == 7
    result = CliRunner().invoke(main, ["image", "prune"])
    assert result.exit_code == 0, result.output
    assert "kept c-compute-a1: testbed tb1 boots from it" in result.output
    assert sorted(i.name for i in store.images(root)) == ["c-compute-a1", "c-compute-a3", "c-compute-a4",
                                                         "c-compute-d13", "c-controller-b1", "other-compute-x1"]
    assert CliRunner().invoke(main, ["image", "prune", "--keep", "0"]).exit_code == 2

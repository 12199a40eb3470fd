"""What can refuse a recorded run is checked before its agent exists: a journal folder that is a
file, a database directory or journal folder on a full disk. One line, exit 2, and the agent
never ran (its command would have created a marker file). Real processes, each with a timeout."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from acp_proxy.record import journal
from acp_proxy.relay import spawn
from acp_proxy.store import dbfile
from tests.conftest import PROXY, proxy_env, run_proxy, wait_recorded

# The launcher takes the first spelling itself (spawn.begin before click loads); a size with a
# unit is click's to parse, so the second goes through cli.run (which calls spawn.begin too).
ENTRIES = {"launcher": [], "click": ["--max-record-bytes=16MiB"]}


def marker_agent(marker: Path) -> list[str]:
    """An agent whose first act (a shell builtin, no fork) creates ``marker``."""
    return ["/bin/sh", "-c", f": > '{marker}'; exec cat"]


def assert_refused_before_the_agent(done: subprocess.CompletedProcess[bytes], marker: Path, *words: str) -> str:
    text = done.stderr.decode("utf-8", "replace")
    assert done.returncode == 2, (done.returncode, text)
    assert text.count("\n") == 1 and text.startswith("acp-proxy: ") and "Traceback" not in text, text
    for word in words:
        assert word in text, text
    assert not marker.exists(), "the agent ran"
    return text


def test_the_launcher_names_the_journal_folder_as_the_journal_module_does(tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    assert journal.journal_dir(db) == Path(str(db) + spawn.JOURNALS_SUFFIX)


@pytest.mark.parametrize("entry", sorted(ENTRIES))
def test_a_journal_folder_that_is_a_file_stops_the_run_before_the_agent(tmp_path: Path, entry: str) -> None:
    db = tmp_path / "rec.db"
    Path(f"{db}.journal").write_text("not a folder")
    marker = tmp_path / "agent-ran"
    done = run_proxy(["run", "--db", str(db), *ENTRIES[entry], "--", *marker_agent(marker)], timeout=60)
    assert_refused_before_the_agent(done, marker, "journal folder", "not a directory")
    assert Path(f"{db}.journal").read_text() == "not a folder"


@pytest.mark.parametrize("entry", sorted(ENTRIES))
def test_a_journal_folder_that_cannot_take_files_stops_the_run(tmp_path: Path, entry: str) -> None:
    db = tmp_path / "rec.db"
    journals = Path(f"{db}.journal")
    journals.mkdir(mode=0o700)
    # A symlink loop where the folder should be: it exists, and nothing can be created in it.
    journals.rmdir()
    journals.symlink_to(journals.name)
    marker = tmp_path / "agent-ran"
    done = run_proxy(["run", "--db", str(db), *ENTRIES[entry], "--", *marker_agent(marker)], timeout=60)
    assert_refused_before_the_agent(done, marker, "journal folder")


OBSTACLES = {
    "a file": lambda p: p.write_text("not a folder"),
    "a symlink loop": lambda p: p.symlink_to(p.name),
    "a dangling symlink": lambda p: p.symlink_to(p.parent / "gone" / "journals"),
    "a file's symlink": lambda p: (p.with_name("plain").write_text(""), p.symlink_to("plain")),
}


@settings(max_examples=12)
@given(obstacle=st.sampled_from(sorted(OBSTACLES)), name=st.sampled_from(["rec.db", "a b.db", "x?#%.sqlite"]))
def test_begin_refuses_before_it_spawns_anything(
    tmp_path_factory: pytest.TempPathFactory, obstacle: str, name: str
) -> None:
    """In-process, deterministic: ``spawn.begin`` raises before it would start the agent (a race
    the marker file above cannot always see: the old code started the agent, then killed it)."""
    directory = tmp_path_factory.mktemp("begin")
    db = directory / name
    OBSTACLES[obstacle](Path(f"{db}.journal"))
    spawned: list[object] = []
    original = spawn.spawn_agent
    spawn.spawn_agent = lambda *args, **kwargs: spawned.append(args) or pytest.fail("the agent was started")
    try:
        with pytest.raises(spawn.RelayError) as caught:
            spawn.begin(["/bin/true"], str(db))
    finally:
        spawn.spawn_agent = original
    assert caught.value.code == 2 and "journal folder" in str(caught.value) and "\n" not in str(caught.value)
    assert spawned == []


def _can_mount_in_a_namespace() -> bool:
    if shutil.which("unshare") is None:
        return False
    try:
        done = subprocess.run(
            ["unshare", "-rm", "sh", "-c", "d=$(mktemp -d) && mount -t tmpfs -o size=64k tmpfs $d && umount $d"],
            capture_output=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


needs_mount = pytest.mark.skipif(not _can_mount_in_a_namespace(), reason="no user+mount namespaces here")

# In a namespace of its own: a small tmpfs, filled, then the proxy asked to record there.
_FULL_DISK = """
set -e
mount -t tmpfs -o size=4m tmpfs "$DISK"
{prepare}
dd if=/dev/zero of="$DISK/fill"  bs=1M count=8 2>/dev/null || true
exec "$@"
"""


@needs_mount
@pytest.mark.parametrize(
    ("entry", "existing"),
    [("launcher", False), ("click", False), ("launcher", True)],
    ids=["launcher-new-db", "click-new-db", "launcher-existing-db"],
)
def test_a_full_disk_stops_the_run_before_the_agent(tmp_path: Path, entry: str, existing: bool) -> None:
    disk = tmp_path / "disk"
    disk.mkdir()
    db = disk / "rec.db"
    marker = tmp_path / "agent-ran"  # outside the full disk
    prepare = ""
    if existing:  # a recording from an earlier run, its journal folder there
        first = f'{sys.executable} -m acp_proxy run --db "$DISK/rec.db" -- /bin/true </dev/null'
        prepare = f'{first} && test -s "$DISK/rec.db" && echo prepared'
    script = _FULL_DISK.format(prepare=prepare)
    env = proxy_env(DISK=str(disk))
    command = [*PROXY, "run", "--db", str(db), *ENTRIES[entry], "--", *marker_agent(marker)]
    done = subprocess.run(
        ["unshare", "-rm", "sh", "-c", script, "full-disk", *command],
        input=b"",
        capture_output=True,
        timeout=120,
        env=env,
    )
    assert_refused_before_the_agent(done, marker, "no space left on device")
    assert done.stdout == (b"prepared\n" if existing else b"")


def test_probe_dir_leaves_nothing_behind(tmp_path: Path) -> None:
    dbfile.probe_dir(tmp_path)
    assert list(tmp_path.iterdir()) == []
    plain = tmp_path / "plain"
    plain.write_text("")
    with pytest.raises(NotADirectoryError):
        dbfile.probe_dir(plain)
    assert list(tmp_path.iterdir()) == [plain]


def test_a_run_still_records_after_the_checks(tmp_path: Path) -> None:
    db = tmp_path / "rec.db"
    done = run_proxy(["run", "--db", str(db), "--", "/bin/sh", "-c", "echo hello"], timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"hello\n"
    leftovers = [p.name for p in tmp_path.iterdir() if "probe" in p.name]
    assert leftovers == []
    wait_recorded(db)
    assert not Path(f"{db}.journal").exists()  # a run recorded whole leaves no empty folder behind


@pytest.mark.parametrize("entry", sorted(ENTRIES))
def test_a_closed_stdout_stops_the_run_before_the_agent_by_either_entry(tmp_path: Path, entry: str) -> None:
    """The CLI holds a closed fd 1 with /dev/null opened read-only (so that no database takes its
    number): ``run`` by click still sees that there is nowhere to relay to."""
    marker = tmp_path / "agent-ran"
    done = subprocess.run(
        [*PROXY, "run", "--db", str(tmp_path / "rec.db"), *ENTRIES[entry], "--", *marker_agent(marker)],
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: os.close(1),
        timeout=60,
        env=proxy_env(),
    )
    text = assert_refused_before_the_agent(done, marker, "stdout (fd 1) is closed")
    assert text.endswith("nowhere to relay the agent's output\n")

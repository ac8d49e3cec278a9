"""scripts/mongo-suite (docs/mongodb.md "Run the MongoDB suite"): the parts that run here."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "mongo-suite"


def test_the_script_is_executable_bash() -> None:
    assert os.access(SCRIPT, os.X_OK)
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)


def test_without_docker_or_a_uri_it_says_what_to_do_and_exits_2(tmp_path: Path) -> None:
    """A PATH holding no `docker` (only what the script needs before looking for it)."""
    for tool in ("dirname",):
        found = shutil.which(tool)
        assert found is not None
        (tmp_path / tool).symlink_to(found)
    env = {k: v for k, v in os.environ.items() if k != "JOBLEDGER_TEST_MONGO_URI"}
    env["PATH"] = str(tmp_path)
    bash = shutil.which("bash")
    assert bash is not None
    done = subprocess.run(
        [bash, str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 2, done.stderr
    assert "no Docker engine answers and JOBLEDGER_TEST_MONGO_URI is not set" in done.stderr
    assert "JOBLEDGER_TEST_MONGO_URI='mongodb://" in done.stderr

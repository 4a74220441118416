"""A non-editable install carries every data file the commands read at run time.

The wheel is built offline from a copy of the source (setuptools' own backend, no network,
no build isolation) and its file list is compared with the data files in the source tree.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("planner", "cost_models")


def _data_files() -> set[str]:
    """Every non-Python file under the packages, as a wheel would name it."""
    found = set()
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*"):
            if (path.is_file() and path.suffix not in (".py", ".pyc")
                    and "__pycache__" not in path.parts):
                found.add(path.relative_to(ROOT).as_posix())
    return found


def _build_wheel(tmp_path: Path) -> set[str]:
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for package in PACKAGES:
        shutil.copytree(ROOT / package, src / package,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    out = tmp_path / "dist"
    code = ("import sys; from setuptools import build_meta; "
            "print(build_meta.build_wheel(sys.argv[1]))")
    proc = subprocess.run([sys.executable, "-c", code, str(out)], cwd=src,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    wheel = out / proc.stdout.strip().splitlines()[-1]
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
        import planner

        # `hetplan --version` and the installed package agree (one source of the version).
        assert f"\nVersion: {planner.__version__}\n" in zf.read(meta).decode()
        return names


def test_wheel_holds_zoo_clusters_catalog_profiles_and_measurements(tmp_path: Path) -> None:
    names = _build_wheel(tmp_path)
    data = _data_files()
    missing = sorted(data - names)
    assert not missing, f"data files left out of the wheel: {missing}"
    # The files the commands cannot run without, named so that a glob matching nothing fails.
    for required in ("planner/configs/models/llama3-70b.yaml",
                     "planner/configs/clusters/lab-mixed.yaml",
                     "cost_models/catalog/gpus.yaml",
                     "cost_models/profiles/sailor.csv",
                     "planner/costing/validation/data/README.md",
                     "planner/costing/validation/data/amp_measured_plans.csv",
                     "planner/costing/validation/data/sailor_measured_plans.csv",
                     "planner/costing/validation/data/nemo_b200.csv",
                     "planner/costing/validation/data/nemo_h100_2025.csv",
                     "planner/costing/validation/data/mpt_llm_foundry.csv"):
        assert required in names
    zoo = {Path(n).stem for n in names if n.startswith("planner/configs/models/")}
    clusters = {Path(n).stem for n in names if n.startswith("planner/configs/clusters/")}
    from planner.cluster.load import bundled_clusters
    from planner.graph.load_spec import zoo_names
    assert zoo == set(zoo_names()) and len(zoo) >= 10
    assert clusters == set(bundled_clusters()) and len(clusters) >= 10
    from planner.costing.validation import DATA_FILES
    shipped = {Path(n).name for n in names if n.startswith("planner/costing/validation/data/")}
    assert shipped >= set(DATA_FILES)
    assert not any(n.startswith(("tests/", "bench/", "configs/")) for n in names)

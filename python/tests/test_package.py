"""The package itself: library discovery, and a docstring on every public
name (the rule for the package's API)."""
import inspect
import os
import subprocess
import sys

import kiln
import kiln.nn
import kiln.nn.functional
import kiln.optim

PKG = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir)


def _import_with(env_changes):
    env = dict(os.environ)
    env.update(env_changes)
    env["PYTHONPATH"] = PKG
    return subprocess.run(
        [sys.executable, "-c", "import kiln; print(kiln.library_path)"],
        capture_output=True, text=True, timeout=120, env=env)


def test_kiln_library_is_used_or_refused():
    r = _import_with({"KILN_LIBRARY": kiln.library_path})
    assert r.returncode == 0 and r.stdout.strip() == kiln.library_path
    r = _import_with({"KILN_LIBRARY": "/nonexistent/libkiln.so"})
    assert r.returncode != 0
    assert "KILN_LIBRARY=/nonexistent/libkiln.so does not exist" in r.stderr


def test_kiln_build_dir():
    build = os.path.dirname(kiln.library_path)
    env = {"KILN_BUILD_DIR": build}
    env_no = {k: "" for k in ("KILN_LIBRARY",)}
    env_no.update(env)
    r = _import_with(env_no)
    assert r.returncode == 0, r.stderr
    assert os.path.dirname(r.stdout.strip()) == build


def _public(module):
    for name in getattr(module, "__all__", dir(module)):
        if not name.startswith("_"):
            yield name, getattr(module, name)


def test_every_public_name_has_a_docstring():
    missing = []
    for mod in (kiln, kiln.nn, kiln.nn.functional, kiln.optim):
        for name, obj in _public(mod):
            if inspect.ismodule(obj) or not callable(obj):
                continue
            if not (obj.__doc__ or "").strip():
                missing.append(f"{mod.__name__}.{name}")
            if inspect.isclass(obj):
                for mname, m in vars(obj).items():
                    if mname.startswith("_") or not callable(m):
                        continue
                    if not (m.__doc__ or "").strip():
                        missing.append(f"{mod.__name__}.{name}.{mname}")
    for mname in dir(kiln.Tensor):
        m = getattr(kiln.Tensor, mname)
        if not mname.startswith("_") and not (m.__doc__ or "").strip():
            missing.append(f"kiln.Tensor.{mname}")
    assert not missing, missing

#!/usr/bin/env python3
"""Port a DiT4DiT checkout to Ascend NPU, or emit / check the patch that does so.

    python scripts/port_to_npu.py CHECKOUT                       # edit the two files in place
    python scripts/port_to_npu.py CHECKOUT --emit-patch FILE     # write a `git apply` patch, touch nothing
    python scripts/port_to_npu.py CHECKOUT --check [--patch F]   # fail if patches/dit4dit_npu.patch is stale

The device surface of DiT4DiT is two files: `training/train.py` and `model/framework/DiT4DiT.py`.
In each, the tool inserts a guarded `torch_npu` / `transfer_to_npu` import with small helpers (only a
host without torch_npu falls back to CPU/CUDA; an installed torch_npu that fails to load stops the run
with one line naming the failed import and the fix), and turns every `torch.autocast("cuda", ...)` into `_npu_autocast(...)`: autocast on npu, falling
back to the device in use when torch_npu is missing. In train.py it also adds `fused=True` to
`torch.optim.AdamW(...)`, runs the `__main__` body inside the mx_driving patcher, and hands the step profiler
(trainer.profile_steps) torch_npu.profiler: each `torch.profiler` becomes `_profiler_api()`.

Sites are found with `ast`. The edits are spliced into the source text at the nodes' exact
positions, so every other byte is unchanged. Running the tool on a ported tree changes nothing.

Exit status: 0 done (or already ported, or the patch is current); 1 stale patch or unusable
input; 2 not a DiT4DiT checkout, or an expected site is missing (each one is listed).
"""

from __future__ import annotations

import argparse
import ast
import difflib
import io
import os
import symtable
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

TRAIN = "DiT4DiT/training/train.py"
FRAMEWORK = "DiT4DiT/model/framework/DiT4DiT.py"
# The original has four autocast sites in the framework (forward and predict_action, bf16 and
# fp32 each) and one in the train step.
EXPECTED_AUTOCASTS = {TRAIN: 1, FRAMEWORK: 4}
DEFAULT_PATCH = Path(__file__).resolve().parent.parent / "patches" / "dit4dit_npu.patch"
REGENERATE = "python scripts/port_to_npu.py . --emit-patch patches/dit4dit_npu.patch"

# The launcher greps for the transfer_to_npu import line to tell that a tree is patched: keep it verbatim.
# Only a host without torch_npu falls back; an installed torch_npu that fails to load (no CANN environment, a
# dependency such as setuptools missing) stops the run, since going on would train without the NPU unnoticed.
# ERROR_BASE is DiT4DiTError in a checkout that has DiT4DiT/errors.py, RuntimeError in an original one.
GUARDED_IMPORT = '''

class TorchNpuImportError(ERROR_BASE):
    """torch_npu is installed but does not load: the run stops instead of going on without the NPU."""

    exit_code = 1


if importlib.util.find_spec("torch_npu") is None:  # a CPU/CUDA host: _autocast_device() warns once, falls back
    _TORCH_NPU_IMPORT_ERROR = ModuleNotFoundError("No module named 'torch_npu'")
else:
    _TORCH_NPU_STEP = "import torch_npu"
    try:
        import torch_npu  # noqa: F401  registers the "npu" device with torch
        _TORCH_NPU_STEP = "from torch_npu.contrib import transfer_to_npu"
        from torch_npu.contrib import transfer_to_npu  # noqa: F401  maps cuda calls onto npu
    except Exception as _error:
        _stop = TorchNpuImportError(
            f"torch_npu is installed but `{_TORCH_NPU_STEP}` failed ({_error!r}); source CANN's set_env.sh and "
            "install requirements-npu.txt (torch_npu must match CANN and torch), or uninstall torch-npu to run "
            "on CPU/CUDA"
        )
        if __name__ == "__main__":  # the entry point: one line, not a traceback
            print(f"TorchNpuImportError: {_stop}", file=sys.stderr)
            sys.exit(_stop.exit_code)
        raise _stop from _error
    _TORCH_NPU_IMPORT_ERROR = None
'''

# Shared by both files, so it is generated from this one template.
AUTOCAST_HELPERS = '''

@functools.cache
def _autocast_device() -> str:
    """Device type for autocast: npu with torch_npu, else the device in use (warned once per process)."""
    if _TORCH_NPU_IMPORT_ERROR is None:
        return "npu"
    device = "cuda" if torch.cuda.is_available() else "cpu"
    # Both patched files carry this helper. One fixed location in one registry (torch's) makes the second
    # file's identical warning a repeat, so a run prints it once.
    warnings.warn_explicit(
        f"torch_npu is not importable ({_TORCH_NPU_IMPORT_ERROR}); autocast runs on {device} instead of npu",
        RuntimeWarning,
        filename="torch_npu",
        lineno=0,
        module="torch_npu",
        registry=vars(torch).setdefault("__warningregistry__", {}),
    )
    return device


def _npu_autocast(dtype=None, enabled=True, cache_enabled=None):
    """torch.autocast on _autocast_device().

    CPU autocast supports only bf16/fp16 (torch 2.7 warns and disables a float32 one on every
    entry), so a float32 autocast on CPU is disabled up front: that is what it amounts to there.
    """
    device = _autocast_device()
    enabled = enabled and not (device == "cpu" and dtype == torch.float32)
    return torch.autocast(device, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)
'''

# Only train.py runs the entry point.
PATCHER_HELPER = '''

_MX_PATCHER_MODES = ("lean", "default", "off")


def _mx_patcher_mode() -> str:
    """DIT4DIT_MX_PATCHER: default (mx_driving's default patcher as shipped, the port's recipe) unless it names lean
    or off; the older DIT4DIT_DISABLE_MX_PATCHER=1 means off."""
    if os.environ.get("DIT4DIT_DISABLE_MX_PATCHER") == "1":
        return "off"
    mode = os.environ.get("DIT4DIT_MX_PATCHER", "default")
    if mode not in _MX_PATCHER_MODES:
        sys.exit(f"DIT4DIT_MX_PATCHER={mode!r}: expected one of {', '.join(_MX_PATCHER_MODES)}")
    return mode


def _applied_patch_names(built) -> list[str] | None:
    """The patches that took effect, from the patcher's own records (None where this mx_driving keeps none)."""
    if hasattr(built, "_collect_all_patches"):  # 2.0: atomic patches, each with its Patch class's name
        return list(dict.fromkeys(parent for patch, parent in built._collect_all_patches() if patch.is_applied))
    if hasattr(built, "module_patches"):  # 1.0: patches of the modules that imported
        return [p.name for patches in built.module_patches.values() for p in patches if getattr(p, "is_applied", False)]
    return None


def _enter_mx_patcher(stack: contextlib.ExitStack, mode: str) -> tuple[str, bool]:
    """Enter mx_driving's default patcher on `stack`: default_patcher (API 2.0) or default_patcher_builder (1.0).
    Returns (the start-up line: what it applied, or why it did not; whether that is a problem).

    lean leaves out its two global torch patches (Tensor indexing, torch.matmul), which put a Python check on
    every such call; no device measurement has shown that check to cost a step anything, so the default is the
    patcher as shipped. The rest targets mmcv/mmdet/numpy, of which only the numpy aliases (np.float, np.int) can
    apply here. DiffusersNPU is not added: it only expands (..., 1, S)
    attention masks, for diffusers 0.35.1 only, and this model passes none. A patcher that fails to import or
    apply is a warning; training goes on without it.
    """
    root = logging.getLogger()
    saved = root.level, root.handlers[:]
    opp_path = os.environ.get("ASCEND_CUSTOM_OPP_PATH")
    try:
        from mx_driving import patcher
    except Exception as error:  # ImportError, or the driver/CANN error of its compiled extension
        return f"mx_driving is not importable ({error}); training without its patcher", True
    finally:  # importing mx_driving calls logging.basicConfig(INFO): the logging set-up stays the trainer's
        root.setLevel(saved[0])
        root.handlers[:] = saved[1]
    try:
        if hasattr(patcher.Patcher, "add"):  # API 2.0 (1.0 exports a Patcher too, without add)
            api, built, left_out = "2.0", patcher.default_patcher, ("tensor_index", "batch_matmul")
            if mode == "lean":
                built.disable(patcher.TensorIndex, patcher.BatchMatmul)
        else:
            api, builder, left_out = "1.0", patcher.default_patcher_builder, ("index", "batch_matmul")
            if mode == "lean":
                builder.disable_patches(*left_out)
            built = builder.build()
        stack.enter_context(built)  # applies; 1.0 is exited with the body, 2.0 patches for the process
    except Exception as error:
        return f"the mx_driving patcher ({mode}) failed to apply ({error!r}); training without it", True
    try:
        version = importlib.metadata.version("mx-driving")
    except importlib.metadata.PackageNotFoundError:
        version = "version unknown"
    applied = _applied_patch_names(built)
    line = (f"mx_driving patcher ({mode}; mx-driving {version}, API {api}): applied "
            + ("(names not reported by this mx_driving)" if applied is None else ", ".join(applied) or "nothing"))
    if mode == "lean":
        line += f"; left out {', '.join(left_out)}"
    if os.environ.get("ASCEND_CUSTOM_OPP_PATH") != opp_path:
        line += f"; importing mx_driving set ASCEND_CUSTOM_OPP_PATH={os.environ.get('ASCEND_CUSTOM_OPP_PATH')}"
    return line + " (DIT4DIT_MX_PATCHER=off skips it)", False


def _apply_mx_patcher(stack: contextlib.ExitStack) -> tuple[str, bool]:
    """The patcher as DIT4DIT_MX_PATCHER says (lean, default or off): (its start-up line, whether a problem)."""
    mode = _mx_patcher_mode()
    if mode == "off":
        return "mx_driving patcher: off (DIT4DIT_MX_PATCHER=off or DIT4DIT_DISABLE_MX_PATCHER=1)", False
    return _enter_mx_patcher(stack, mode)


@contextlib.contextmanager
def _mx_driving_patcher():
    """Run the body inside mx_driving's patcher; one line says what it applied (rank 0), or warns why not."""
    with contextlib.ExitStack() as stack:
        line, problem = _apply_mx_patcher(stack)
        if problem:
            warnings.warn(line, RuntimeWarning)
        elif os.environ.get("RANK", "0") == "0":
            print(line, file=sys.stderr, flush=True)
        yield
'''

# Only train.py, and only where it profiles (trainer.profile_steps): torch.profiler becomes _profiler_api().
PROFILER_HELPER = '''

def _profiler_api():
    """torch_npu.profiler where torch_npu loaded (its own trace format, which MindStudio Insight reads; the device's
    operators), else torch.profiler."""
    if _TORCH_NPU_IMPORT_ERROR is None:
        import torch_npu.profiler

        return torch_npu.profiler
    return torch.profiler
'''
PROFILER = "torch.profiler"

HELPER_IMPORTS = {
    FRAMEWORK: ("functools", "importlib.util", "sys", "warnings"),
    TRAIN: ("contextlib", "functools", "importlib.metadata", "importlib.util", "logging", "os", "sys", "warnings"),
}
ERROR_BASE_IMPORT = "from DiT4DiT.errors import DiT4DiTError"


class PortError(Exception):
    """The checkout cannot be ported; the message says what is missing."""


@dataclass
class Ported:
    """Result of porting one file's source text."""

    source: str
    changes: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)


@dataclass(order=True)
class _Edit:
    start: int
    end: int
    text: str


class _Text:
    """Maps ast (line, UTF-8 byte column) positions to offsets into the source string."""

    def __init__(self, source: str):
        self.source = source
        # Lines as the tokenizer counts them (str.splitlines also splits at form feeds and the like).
        self.lines = io.StringIO(source, newline="").readlines()
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))

    def offset(self, lineno: int, col: int) -> int:
        line = self.lines[lineno - 1] if lineno <= len(self.lines) else ""
        return self.starts[lineno - 1] + len(line.encode()[:col].decode())

    def span(self, node: ast.AST) -> tuple[int, int]:
        return self.offset(node.lineno, node.col_offset), self.offset(node.end_lineno, node.end_col_offset)

    def segment(self, node: ast.AST) -> str:
        start, end = self.span(node)
        return self.source[start:end]

    def line_end(self, lineno: int) -> int:
        return self.starts[lineno]

    def indent_of(self, lineno: int) -> str:
        line = self.lines[lineno - 1]
        return line[: len(line) - len(line.lstrip())]


def _dotted(node: ast.AST) -> str:
    """'torch.optim.AdamW' for an attribute chain of names, '' otherwise."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return ""
    parts.append(node.id)
    return ".".join(reversed(parts))


def _cuda_device_arg(call: ast.Call) -> ast.AST | None:
    """The `"cuda"` device argument of a torch.autocast call, or None."""
    if call.args:
        candidate = call.args[0]
    else:
        candidate = next((k.value for k in call.keywords if k.arg == "device_type"), None)
    if isinstance(candidate, ast.Constant) and candidate.value == "cuda":
        return candidate
    return None


def _imports_torch(stmt: ast.stmt) -> bool:
    if isinstance(stmt, ast.Import):
        return any(alias.name == "torch" or alias.name.startswith("torch.") for alias in stmt.names)
    return isinstance(stmt, ast.ImportFrom) and (stmt.module or "").split(".")[0] == "torch" and stmt.level == 0


def _is_dist_import(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Import) and any(
        alias.name == "torch.distributed" and alias.asname == "dist" for alias in stmt.names
    )


def _is_guarded_import(stmt: ast.stmt) -> bool:
    """A top-level block (try, if) around `import torch_npu`: ours, or one written by hand."""
    return isinstance(stmt, (ast.Try, ast.If)) and any(
        isinstance(inner, ast.Import) and any(alias.name == "torch_npu" for alias in inner.names)
        for inner in ast.walk(stmt)
    )


def _is_main_guard(stmt: ast.stmt) -> bool:
    test = stmt.test if isinstance(stmt, ast.If) else None
    return (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == "__name__"
        and len(test.comparators) == 1
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value == "__main__"
    )


def _profiler_nodes(tree: ast.Module) -> list[ast.Attribute]:
    """The `torch.profiler` expressions of a file, outside the helper that returns it."""
    inside = {id(n) for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) and f.name == "_profiler_api"
              for n in ast.walk(f)}
    return [n for n in ast.walk(tree) if isinstance(n, ast.Attribute) and _dotted(n) == PROFILER and id(n) not in inside]


def _helpers_for(rel: str, tree: ast.Module) -> str:
    train = PATCHER_HELPER + (PROFILER_HELPER if _profiler_nodes(tree) else "") if rel == TRAIN else ""
    return AUTOCAST_HELPERS + train


def _block_imports(rel: str, tree: ast.Module, error_base: str, anchor: ast.stmt) -> str:
    """Import lines for the helpers' modules (and the error base) that the file does not import before `anchor`
    (the guarded block runs right after it, so a later import of the same name comes too late)."""
    before = [stmt for stmt in tree.body if stmt.lineno <= anchor.lineno]
    present = {alias.name for stmt in before if isinstance(stmt, ast.Import) for alias in stmt.names}
    lines = [f"import {name}\n" for name in HELPER_IMPORTS[rel] if name not in present]
    from_errors = any(isinstance(stmt, ast.ImportFrom) and stmt.module == "DiT4DiT.errors"
                      and any(alias.name == "DiT4DiTError" and alias.asname is None for alias in stmt.names)
                      for stmt in before)
    if error_base == "DiT4DiTError" and not from_errors:
        lines.append(ERROR_BASE_IMPORT + "\n")
    return "".join(lines)


def _header_edits(rel: str, tree: ast.Module, text: _Text, result: Ported, error_base: str) -> list[_Edit]:
    """The guarded import after `import torch.distributed as dist` (else the last torch import),
    and the helpers after the last top-level import that precedes the first def/class."""
    body = tree.body
    if any(_is_guarded_import(stmt) for stmt in body):
        return []
    anchor = next((stmt for stmt in body if _is_dist_import(stmt)), None)
    if anchor is None:
        torch_imports = [stmt for stmt in body if _imports_torch(stmt)]
        if not torch_imports:
            result.missing.append(f"no top-level `import torch` in {rel} to put the torch_npu import after")
            return []
        anchor = torch_imports[-1]
    first_def = next(
        (i for i, stmt in enumerate(body) if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))),
        len(body),
    )
    imports = [i for i, stmt in enumerate(body[:first_def]) if isinstance(stmt, (ast.Import, ast.ImportFrom))]
    last_import = max([body.index(anchor), *imports])
    guarded_at = text.line_end(anchor.end_lineno)
    helpers_at = text.line_end(body[last_import].end_lineno)
    result.changes.append(f"{rel}:{anchor.end_lineno}: guarded torch_npu / transfer_to_npu import")
    result.changes.append(f"{rel}:{body[last_import].end_lineno}: NPU helpers ({', '.join(_helper_names(rel))})")
    guarded = _block_imports(rel, tree, error_base, anchor) + GUARDED_IMPORT.replace("ERROR_BASE", error_base)
    if anchor.end_lineno < len(text.lines) and text.lines[anchor.end_lineno].strip():
        guarded += "\n"  # keep a blank line between the block and the imports that follow
    if helpers_at == guarded_at:
        return [_Edit(guarded_at, guarded_at, guarded + _helpers_for(rel, tree))]
    return [_Edit(guarded_at, guarded_at, guarded), _Edit(helpers_at, helpers_at, _helpers_for(rel, tree))]


def _helper_names(rel: str) -> list[str]:
    names = ["_autocast_device", "_npu_autocast"]
    return names + (["_mx_patcher_mode", "_applied_patch_names", "_enter_mx_patcher", "_apply_mx_patcher",
                     "_mx_driving_patcher", "_profiler_api"] if rel == TRAIN else [])


def _autocast_edits(rel: str, tree: ast.Module, text: _Text, result: Ported) -> list[_Edit]:
    edits, ported = [], 0
    for node in sorted(ast.walk(tree), key=lambda n: (getattr(n, "lineno", 0), getattr(n, "col_offset", 0))):
        if not isinstance(node, ast.Call):
            continue
        if isinstance(node.func, ast.Name) and node.func.id == "_npu_autocast":
            ported += 1
            continue
        if _dotted(node.func) not in ("torch.autocast", "torch.amp.autocast"):
            continue
        device = _cuda_device_arg(node)
        if device is None:
            continue
        kept = [text.segment(arg) for arg in node.args if arg is not device]
        kept += [text.segment(k) for k in node.keywords if k.value is not device]
        start, end = text.span(node)
        replacement = f"_npu_autocast({', '.join(kept)})"
        edits.append(_Edit(start, end, replacement))
        result.changes.append(f"{rel}:{node.lineno}: {text.segment(node)} -> {replacement}")
    expected = EXPECTED_AUTOCASTS[rel]
    if len(edits) + ported < expected:
        result.missing.append(
            f'{rel}: found {len(edits) + ported} torch.autocast("cuda", ...) call(s), expected {expected}'
            if edits or ported
            else f'no torch.autocast("cuda", ...) call found in {rel} (expected {expected})'
        )
    return edits


def _adamw_edits(rel: str, tree: ast.Module, text: _Text, result: Ported) -> list[_Edit]:
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and _dotted(n.func) == "torch.optim.AdamW"]
    if not calls:
        result.missing.append(f"no torch.optim.AdamW(...) call in {rel}")
    edits = []
    for call in calls:
        fused = next((k for k in call.keywords if k.arg == "fused"), None)
        if fused is not None:
            if not (isinstance(fused.value, ast.Constant) and fused.value.value is True):
                start, end = text.span(fused.value)
                edits.append(_Edit(start, end, "True"))
                result.changes.append(f"{rel}:{call.lineno}: AdamW fused={text.segment(fused.value)} -> fused=True")
            continue
        last = (call.args + call.keywords)[-1] if call.args or call.keywords else None
        # After the last argument (before a trailing comma, if any), or inside empty parentheses;
        # on its own line when the arguments are one per line.
        if last is None:
            at, insert = text.span(call)[1] - 1, "fused=True"
        elif last.lineno > call.lineno:
            at, insert = text.span(last)[1], f",\n{text.indent_of(last.lineno)}fused=True"
        else:
            at, insert = text.span(last)[1], ", fused=True"
        edits.append(_Edit(at, at, insert))
        result.changes.append(f"{rel}:{call.lineno}: torch.optim.AdamW(...) gets fused=True")
    return edits


def _profiler_edits(rel: str, tree: ast.Module, text: _Text, result: Ported) -> list[_Edit]:
    """Each `torch.profiler` the trainer hands its step profiler becomes `_profiler_api()` (none: nothing to do)."""
    edits = []
    for node in _profiler_nodes(tree):
        start, end = text.span(node)
        edits.append(_Edit(start, end, "_profiler_api()"))
        result.changes.append(f"{rel}:{node.lineno}: {PROFILER} -> _profiler_api() (torch_npu.profiler on NPU)")
    return edits


def _main_edits(rel: str, tree: ast.Module, text: _Text, result: Ported) -> list[_Edit]:
    guard = next((stmt for stmt in tree.body if _is_main_guard(stmt)), None)
    if guard is None:
        result.missing.append(f"no if __name__ == '__main__' block in {rel}")
        return []
    first = guard.body[0]
    wrapped = isinstance(first, ast.With) and len(guard.body) == 1 and any(
        isinstance(item.context_expr, ast.Call) and _dotted(item.context_expr.func) == "_mx_driving_patcher"
        for item in first.items
    )
    if wrapped:
        return []
    indent = text.indent_of(first.lineno)
    start = text.starts[first.lineno - 1]
    end = text.line_end(guard.body[-1].end_lineno)
    body = text.source[start:end]
    reindented = "".join(f"    {line}" if line.strip() else line for line in body.splitlines(keepends=True))
    result.changes.append(f"{rel}:{guard.lineno}: __main__ body runs inside _mx_driving_patcher()")
    return [_Edit(start, end, f"{indent}with _mx_driving_patcher():\n{reindented}")]


def port_source(rel: str, source: str, error_base: str = "RuntimeError") -> Ported:
    """Port one of the two files; `rel` is its path relative to the checkout root.

    `error_base` is the base of the TorchNpuImportError the ported file raises: DiT4DiTError where the checkout
    has DiT4DiT/errors.py (see error_base_of), RuntimeError in an original checkout.
    """
    try:
        tree = ast.parse(source, filename=rel)
    except SyntaxError as error:
        raise PortError(f"{rel} is not valid Python (line {error.lineno}): {error.msg}") from error
    text, result = _Text(source), Ported(source)
    edits = _header_edits(rel, tree, text, result, error_base) + _autocast_edits(rel, tree, text, result)
    if rel == TRAIN:
        edits += (_adamw_edits(rel, tree, text, result) + _main_edits(rel, tree, text, result)
                  + _profiler_edits(rel, tree, text, result))
    if result.missing:
        return result
    ported = source
    for edit in sorted(edits, reverse=True):
        ported = ported[: edit.start] + edit.text + ported[edit.end :]
    ast.parse(ported, filename=rel)  # the splice must still be valid Python
    result.source = ported
    return result


def read_checkout(checkout: Path) -> dict[str, str]:
    """The two files' text; PortError listing what is missing if this is not a DiT4DiT checkout."""
    missing = [rel for rel in (TRAIN, FRAMEWORK) if not (checkout / rel).is_file()]
    if missing:
        raise PortError(
            f"{checkout} is not a DiT4DiT checkout: missing " + ", ".join(missing)
            + " (pass the repository root that contains DiT4DiT/)"
        )
    return {rel: (checkout / rel).read_text(encoding="utf-8") for rel in (TRAIN, FRAMEWORK)}


def error_base_of(checkout: Path) -> str:
    """DiT4DiTError where the checkout defines it (this repository), else RuntimeError (the original)."""
    errors = checkout / "DiT4DiT" / "errors.py"
    return "DiT4DiTError" if errors.is_file() and "class DiT4DiTError(" in errors.read_text(encoding="utf-8") else "RuntimeError"


def port_checkout(checkout: Path) -> dict[str, Ported]:
    """Port both files in memory; PortError lists every missing site, then every broken post-condition."""
    sources = read_checkout(checkout)
    base = error_base_of(checkout)
    results = {rel: port_source(rel, source, base) for rel, source in sources.items()}
    missing = [line for result in results.values() for line in result.missing]
    if missing:
        raise PortError("expected sites not found:\n  " + "\n  ".join(missing))
    broken = [line for rel, result in results.items()
              for line in post_condition_problems(rel, result.source, sources[rel])]
    if broken:
        raise PortError("the ported files would not work on NPU (nothing was written):\n  " + "\n  ".join(broken))
    return results


# Post-conditions of a ported file, checked on the result whatever the input looked like (a hand-edited or
# half-ported tree): no autocast left on cuda, every name the port relies on defined, and it compiles.
CUDA_ONLY_AUTOCASTS = ("torch.cuda.amp.autocast", "torch.cuda.amp.autocast_mode.autocast")
DEVICE_AUTOCASTS = ("torch.autocast", "torch.amp.autocast", "torch.amp.autocast_mode.autocast")


def _import_aliases(tree: ast.Module) -> dict[str, str]:
    """Local name -> the dotted name it stands for, from every import in the file (`import torch.cuda.amp as
    amp`, `from torch.cuda.amp import autocast as ac`, ...)."""
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                aliases[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return aliases


def _canonical(func: ast.AST, aliases: dict[str, str]) -> str:
    dotted = _dotted(func)
    head, _, rest = dotted.partition(".")
    return aliases.get(head, head) + (f".{rest}" if rest else "") if dotted else ""


def _cuda_strings(tree: ast.Module) -> set[str]:
    """Names assigned the constant "cuda" anywhere in the file (a device kept in a variable)."""
    return {
        target.id
        for node in ast.walk(tree)
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Constant) and node.value.value == "cuda"
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Name)
    }


def _cuda_autocast_problems(rel: str, tree: ast.Module) -> list[str]:
    aliases, cuda_names, problems = _import_aliases(tree), _cuda_strings(tree), []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = _canonical(node.func, aliases)
        if name in CUDA_ONLY_AUTOCASTS:
            problems.append(f"{rel}:{node.lineno}: {_dotted(node.func)}(...) is a cuda-only autocast; write it as "
                            'torch.autocast("cuda", ...) so the port turns it into _npu_autocast(...)')
        elif name in DEVICE_AUTOCASTS:
            device = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "device_type"), None)
            in_variable = isinstance(device, ast.Name) and device.id in cuda_names
            if (isinstance(device, ast.Constant) and device.value == "cuda") or in_variable:
                how = f'the device comes from variable {device.id} = "cuda"' if in_variable else 'device "cuda"'
                problems.append(f"{rel}:{node.lineno}: {_dotted(node.func)}(...) still autocasts on cuda ({how}); "
                                'write torch.autocast("cuda", ...) with the device as a literal')
    return problems


def _undefined_helper_problems(rel: str, tree: ast.Module, source: str) -> list[str]:
    """Names the ported code relies on (its helpers, their flag and modules) that the file never binds."""
    needed = set(_helper_names(rel)) | {"_TORCH_NPU_IMPORT_ERROR", "torch", *(m.split(".")[0] for m in HELPER_IMPORTS[rel])}
    module = symtable.symtable(source, rel, "exec")
    bound = {s.get_name() for s in module.get_symbols() if s.is_assigned() or s.is_imported() or s.is_namespace()}
    used = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in needed:
            used.setdefault(node.id, node.lineno)
    return [f"{rel}:{line}: uses {name}, which the file does not define (a hand-added torch_npu import made the "
            f"port skip its helpers? remove that import and port again)" for name, line in sorted(used.items(), key=lambda x: x[1])
            if name not in bound]


def _input_line(before: str, after: str, line: int) -> int:
    """The line of the file as the user wrote it that holds (or became) `line` of the ported text."""
    matcher = difflib.SequenceMatcher(None, before.splitlines(), after.splitlines(), autojunk=False)
    for tag, i1, _, j1, j2 in matcher.get_opcodes():
        if j1 <= line - 1 < j2:
            return i1 + (line - 1 - j1) + 1 if tag == "equal" else i1 + 1
    return line


def post_condition_problems(rel: str, source: str, original: str | None = None) -> list[str]:
    """file:line problems of a ported file: it must compile, call no undefined helper, autocast on no cuda.

    Lines are those of `original` (the file before porting) when given, else of `source`.
    """
    try:
        compile(source, rel, "exec")
    except SyntaxError as error:
        problems = [f"{rel}:{error.lineno}: does not compile: {error.msg}"]
    else:
        tree = ast.parse(source, filename=rel)
        problems = _undefined_helper_problems(rel, tree, source) + _cuda_autocast_problems(rel, tree)
    if original is None:
        return problems
    mapped = []
    for problem in problems:
        line, message = problem[len(rel) + 1:].split(": ", 1)
        mapped.append(f"{rel}:{_input_line(original, source, int(line))}: {message}")
    return mapped


def git_diff(rel: str, before: str, after: str) -> str:
    """A `git apply`-able unified diff of one file (a/ and b/ prefixes, paths from the root)."""
    if before == after:
        return ""
    lines = [f"diff --git a/{rel} b/{rel}\n"]
    for line in difflib.unified_diff(
        before.splitlines(keepends=True), after.splitlines(keepends=True), f"a/{rel}", f"b/{rel}"
    ):
        lines.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(lines)


def make_patch(checkout: Path) -> str:
    originals = read_checkout(checkout)
    results = port_checkout(checkout)
    return "".join(git_diff(rel, originals[rel], results[rel].source) for rel in (TRAIN, FRAMEWORK))


def _write_atomically(path: Path, content: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(content)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def _run(args: argparse.Namespace) -> int:
    checkout = args.checkout.resolve()
    results = port_checkout(checkout)
    changes = [line for result in results.values() for line in result.changes]
    if args.check:
        patch_file = args.patch or DEFAULT_PATCH
        if not changes:
            print(f"{checkout} is already ported: --check needs an unported checkout", file=sys.stderr)
            return 1
        current = patch_file.read_text(encoding="utf-8") if patch_file.is_file() else None
        if current != make_patch(checkout):
            state = "stale" if current is not None else f"stale ({patch_file} does not exist)"
            print(f"{patch_file}: {state}: regenerate with {REGENERATE}", file=sys.stderr)
            return 1
        print(f"{patch_file} is current")
        return 0
    if not changes and args.emit_patch is not None:
        print(f"{checkout} is already ported: nothing to emit (the patch is made from an unported checkout)",
              file=sys.stderr)
        return 1
    if not changes:
        print(f"{checkout}: already ported, nothing to change")
        return 0
    for line in changes:
        print(line)
    if args.emit_patch is not None:
        _write_atomically(args.emit_patch, make_patch(checkout))
        print(f"wrote {args.emit_patch} (checkout left unchanged)")
        return 0
    for rel, result in results.items():
        if result.changes:
            _write_atomically(checkout / rel, result.source)
    print(f"ported {checkout}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkout", type=Path, help="root of a DiT4DiT checkout (contains DiT4DiT/)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--emit-patch", type=Path, metavar="FILE", help="write the patch instead of editing")
    mode.add_argument("--check", action="store_true", help="fail if the checked-in patch is stale")
    parser.add_argument("--patch", type=Path, help=f"patch compared by --check (default {DEFAULT_PATCH})")
    args = parser.parse_args(argv)
    if args.patch is not None and not args.check:
        parser.error("--patch only goes with --check")
    try:
        return _run(args)
    except PortError as error:
        print(f"port_to_npu: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

"""Counts, outside DiT4DiT/config/: untyped config reads (attribute chains rooted at a parameter annotated DictConfig,
or an unannotated parameter named cfg/config, plus OmegaConf.select/to_container/update calls) and section(...)
conversions."""
import ast, sys, pathlib, collections
root = pathlib.Path(sys.argv[1])
UNTYPED_LOADS = len(sys.argv) > 2 and sys.argv[2] == "loads-untyped"  # load_config returned an OmegaConf tree
reads, conversions = collections.Counter(), collections.Counter()
for path in sorted(root.rglob("*.py")):
    rel = path.relative_to(root.parent).as_posix()
    if rel.startswith("DiT4DiT/config/"):
        continue
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name) and f.id == "section":
                conversions[rel] += 1
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "OmegaConf" and f.attr in ("select", "to_container", "update", "is_dict", "is_config"):
                reads[rel] += 1
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names = set()
            for a in node.args.args + node.args.kwonlyargs:
                ann = ast.unparse(a.annotation) if a.annotation else None
                if (ann and "DictConfig" in ann) or (ann is None and a.arg in ("cfg", "config")):
                    names.add(a.arg)
            if node.name == "transformer_inputs":  # a diffusers transformer config, not ours
                continue
            for sub in ast.walk(node):  # locals holding a loaded config (an OmegaConf tree before #45)
                if (isinstance(sub, ast.Assign) and isinstance(sub.value, ast.Call) and len(sub.targets) == 1
                        and isinstance(sub.targets[0], ast.Name) and UNTYPED_LOADS
                        and ast.unparse(sub.value.func).split(".")[-1] in ("load_config", "parse_config", "load_run_config")):
                    names.add(sub.targets[0].id)
            if not names:
                continue
            parents = {}
            for sub in ast.walk(node):
                for child in ast.iter_child_nodes(sub):
                    parents[child] = sub
            for sub in ast.walk(node):
                if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and sub.value.id in names:
                    if not isinstance(parents.get(sub), ast.Attribute):  # count each chain once, and a single attribute read
                        pass
                    reads[rel] += 1
print("untyped reads:", sum(reads.values()), "in", len(reads), "modules:", dict(reads.most_common()))
print("section conversions:", sum(conversions.values()), "in", len(conversions), "modules:", dict(conversions.most_common()))

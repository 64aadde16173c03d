import subprocess
import sys


def test_core_imports_without_dagster_or_heavy_libraries():
    code = (
        "import sys, pkgutil, importlib, rag_pipeline.core as core\n"
        "modules = [m.name for m in pkgutil.walk_packages(core.__path__, 'rag_pipeline.core.')]\n"
        "for name in modules: importlib.import_module(name)\n"
        "assert len(modules) > 30, modules\n"
        "heavy = [n for n in ('dagster', 'torch', 'sentence_transformers', 'unstructured') if n in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"core imported at import time: {out.stdout.strip()}"


def test_loading_the_definitions_does_not_load_the_model_or_the_parser():
    """Steps that do not embed or parse must not pay for torch, sentence-transformers or unstructured."""
    code = (
        "import sys, rag_pipeline.definitions, rag_pipeline.cli\n"
        "print(','.join(n for n in ('torch', 'sentence_transformers', 'unstructured') if n in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""

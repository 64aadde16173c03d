"""The model's library imports without scikit-learn, which it only needs for a function the
pipeline never calls; when called, that function still works (fresh interpreters: the test
process may have imported everything already)."""

import subprocess
import sys
import textwrap

import pytest

PROBE = textwrap.dedent("""
    import sys
    from rag_pipeline.core.ingestion import embedding
    {setup}
    st = embedding.import_sentence_transformers()
    print("sklearn at import:", "sklearn" in sys.modules, "stand-in left:", "sklearn.metrics" in sys.modules and
          not hasattr(sys.modules["sklearn.metrics"], "__file__"))
    import torch
    a = torch.tensor([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]])
    sparse = st.util.manhattan_sim(a.to_sparse(), a.to_sparse())  # goes through sklearn's pairwise_distances
    print("same as dense:", torch.allclose(sparse, st.util.manhattan_sim(a, a)), "sklearn after:", "sklearn" in sys.modules)
""")


def _probe(setup: str = "") -> str:
    done = subprocess.run([sys.executable, "-c", PROBE.format(setup=setup)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.slow
def test_scikit_learn_waits_until_the_library_calls_it():
    out = _probe()
    assert "sklearn at import: False stand-in left: False" in out
    assert "same as dense: True sklearn after: True" in out


@pytest.mark.slow
def test_a_library_that_asks_for_more_gets_the_plain_import():
    # A stand-in without the name the library imports: the import falls back to the real module.
    out = _probe('embedding._DEFERRED_IMPORTS = {"sklearn.metrics": ()}')
    assert "sklearn at import: True stand-in left: False" in out
    assert "same as dense: True" in out

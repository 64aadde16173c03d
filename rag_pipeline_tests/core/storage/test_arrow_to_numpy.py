"""Arrow columns become numpy without pandas: the values of a slice, not of its whole buffer."""

import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

from rag_pipeline.core.storage.duckdb import arrow_to_numpy


@pytest.mark.parametrize(("values", "arrow_type"), [
    (list(range(20)), pa.int32()), (list(range(20)), pa.int64()), ([i / 3 for i in range(20)], pa.float32()),
    ([i / 3 for i in range(20)], pa.float64()), (list(range(20)), pa.int8()),
])
def test_a_slice_keeps_its_own_values(values, arrow_type):
    array = pa.array(values, type=arrow_type)
    for part in (array, array.slice(3, 9), array.slice(19)):
        assert np.array_equal(arrow_to_numpy(part), part.to_numpy(zero_copy_only=False))


def test_nulls_and_other_types_take_pyarrows_path():
    with_null = pa.array([1.5, None, 2.5], type=pa.float64())
    assert np.array_equal(arrow_to_numpy(with_null), [1.5, np.nan, 2.5], equal_nan=True)
    assert np.array_equal(arrow_to_numpy(pa.array([1, 2], type=pa.uint16())), [1, 2])


def test_list_vectors_flattened_from_an_offset_row():
    vectors = pa.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], type=pa.list_(pa.float32()))
    assert np.array_equal(arrow_to_numpy(vectors.slice(1).flatten()), np.float32([3, 4, 5, 6]))


def test_reading_served_vectors_does_not_import_pandas(tmp_path):
    code = f"""
import sys, numpy as np
from rag_pipeline.core.storage.duckdb import DuckDBDatabase
db = DuckDBDatabase({str(tmp_path / 'x.duckdb')!r})
db.execute("CREATE TABLE v (k VARCHAR, vector FLOAT[])")
db.execute("INSERT INTO v SELECT 'k' || i, [i, i + 1]::FLOAT[] FROM range(1000) t(i)")
keys, matrix = db.read_vectors("SELECT k, vector FROM v ORDER BY k")
assert matrix.shape == (1000, 2) and matrix[keys.index('k7')].tolist() == [7.0, 8.0]
print("pandas" in sys.modules)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"

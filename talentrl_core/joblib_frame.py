"""Read a joblib-pickled pandas DataFrame of object columns without pandas, numpy or joblib, and without running code.

HotpotQA's distractor sample in reflexion (``hotpot-qa-distractor-sample.joblib``) is such a file. A restricted
unpickler maps each global the pickle names to an inert stand-in (``GLOBALS``) and rejects any other, so loading it
cannot call anything; joblib's arrays, written inline after their ``NumpyArrayWrapper``, are read by hand (an
object array is a nested pickle, a numeric one raw bytes after an alignment pad). ``rows`` then turns the frame
into one dict per row, columns in their order, nested arrays as lists.
"""

from __future__ import annotations

import io
import math
import pickle
import struct
from typing import Any, BinaryIO


class _Stub:
    """An inert stand-in for a class or function the pickle names: it records its arguments and state only."""

    name = "?"

    def __init__(self, *args: Any) -> None:
        self.args = args
        self.state: Any = None

    def __setstate__(self, state: Any) -> None:
        self.state = state


def _stub(name: str) -> type:
    return type(name, (_Stub,), {"name": name})


def _latin1(text: str, encoding: str = "latin1") -> bytes:
    """``_codecs.encode`` as protocol-2 pickles use it for bytes (``encode(str, 'latin1')``) and nothing else."""
    if encoding != "latin1" or not isinstance(text, str):
        raise pickle.UnpicklingError(f"_codecs.encode({type(text).__name__}, {encoding!r}) is not a bytes literal")
    return text.encode("latin1")


GLOBALS: dict[tuple[str, str], Any] = {
    ("pandas.core.frame", "DataFrame"): _stub("DataFrame"),
    ("pandas.core.internals.managers", "BlockManager"): _stub("BlockManager"),
    ("pandas._libs.internals", "_unpickle_block"): _stub("_unpickle_block"),
    ("pandas.core.indexes.base", "_new_Index"): _stub("_new_Index"),
    ("pandas.core.indexes.base", "Index"): _stub("Index"),
    ("pandas.core.indexes.numeric", "Int64Index"): _stub("Int64Index"),
    ("joblib.numpy_pickle", "NumpyArrayWrapper"): _stub("NumpyArrayWrapper"),
    ("numpy", "ndarray"): _stub("ndarray"),
    ("numpy", "dtype"): _stub("dtype"),
    ("numpy.core.multiarray", "_reconstruct"): _stub("_reconstruct"),
    ("builtins", "slice"): _stub("slice"),
    ("_codecs", "encode"): _latin1,
}

_STRUCT = {("i", 1): "b", ("i", 2): "h", ("i", 4): "i", ("i", 8): "q", ("u", 1): "B", ("u", 2): "H", ("u", 4): "I",
           ("u", 8): "Q", ("f", 4): "f", ("f", 8): "d", ("b", 1): "?"}


def _dtype(d: Any) -> tuple[str, int, str]:
    """(kind, itemsize, byte order) of a pickled ``numpy.dtype('i8', False, True)`` with its state."""
    code = d.args[0]
    kind, size = code[0], int(code[1:] or 0)
    order = d.state[1] if d.state else "|"
    return kind, size, ">" if order == ">" else "<"


def _shaped(flat: list, shape: tuple) -> list:
    if len(shape) <= 1:
        return list(flat)
    step = math.prod(shape[1:])
    return [_shaped(flat[i * step:(i + 1) * step], shape[1:]) for i in range(shape[0])]


def _array(shape: tuple, dtype: Any, data: Any, fortran: bool = False) -> list:
    """A numpy array's values as nested lists (C order)."""
    if fortran and len(shape) > 1:
        raise pickle.UnpicklingError("Fortran-ordered arrays are not supported")
    kind, size, order = _dtype(dtype)
    if kind == "O":
        flat = [plain(v) for v in data]
    else:
        fmt = _STRUCT.get((kind, size))
        if fmt is None:
            raise pickle.UnpicklingError(f"unsupported array dtype {kind}{size}")
        flat = list(struct.unpack(f"{order}{math.prod(shape)}{fmt}", data))
    return _shaped(flat, tuple(shape))


def plain(v: Any) -> Any:
    """A loaded value as plain JSON-able Python: arrays → lists, dicts and lists converted recursively."""
    if isinstance(v, _Stub) and v.name == "_reconstruct":  # numpy's ndarray pickle: state (1, shape, dtype, F, data)
        _, shape, dtype, fortran, data = v.state
        return _array(shape, dtype, data, fortran)
    if isinstance(v, dict):
        return {k: plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    if isinstance(v, _Stub):
        raise pickle.UnpicklingError(f"a {v.name} where a plain value was expected")
    return v


class _Unpickler(pickle._Unpickler):  # the pure-Python unpickler: joblib's inline arrays are read from the file
    def __init__(self, file: BinaryIO) -> None:
        super().__init__(file)
        self._fh = file

    def find_class(self, module: str, name: str) -> Any:
        try:
            return GLOBALS[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(f"global {module}.{name} is not allowed in this file") from None

    def _load_build(self) -> None:
        pickle._Unpickler.load_build(self)
        top = self.stack[-1]
        if isinstance(top, _Stub) and top.name == "NumpyArrayWrapper":
            self.stack[-1] = self._read_inline(top.state)

    def _read_inline(self, meta: dict) -> list:
        frame = self._unframer.current_frame
        if frame is not None and frame.tell() != len(frame.getbuffer()):
            raise pickle.UnpicklingError("joblib array data inside a pickle frame")
        shape, dtype = tuple(meta["shape"]), meta["dtype"]
        if _dtype(dtype)[0] == "O":  # joblib pickles object arrays as a nested pickle
            return plain(_Unpickler(self._fh).load())
        if meta.get("numpy_array_alignment_bytes") is not None:
            pad = self._fh.read(1)[0]
            self._fh.read(pad)
        n = math.prod(shape) * _dtype(dtype)[1]
        data = self._fh.read(n)
        if len(data) != n:
            raise pickle.UnpicklingError(f"array data truncated ({len(data)} of {n} bytes)")
        return _array(shape, dtype, data, meta.get("order") == "F")

    dispatch = dict(pickle._Unpickler.dispatch)
    dispatch[pickle.BUILD[0]] = _load_build


def load(data: bytes) -> Any:
    """The top-level object of a joblib file (stand-ins for pandas objects, lists for arrays)."""
    return _Unpickler(io.BytesIO(data)).load()


def _index_values(index: Any) -> list:
    """The values of a pickled pandas Index (``_new_Index(cls, {'data': ..., 'name': ...})``)."""
    if not (isinstance(index, _Stub) and index.name == "_new_Index"):
        raise pickle.UnpicklingError(f"expected a pandas Index, found {type(index).__name__}")
    return index.args[1]["data"]


def rows(frame: Any) -> list[dict]:
    """One dict per row of a loaded DataFrame, columns in their original order (the row index is not kept)."""
    if not (isinstance(frame, _Stub) and frame.name == "DataFrame"):
        raise pickle.UnpicklingError("the file does not hold a pandas DataFrame")
    mgr = frame.state["_mgr"]
    blocks, axes = mgr.args[0], mgr.args[1]
    columns, n_rows = _index_values(axes[0]), len(_index_values(axes[1]))
    by_position: dict[int, list] = {}
    for block in blocks:
        values, locs = block.args[0], block.args[1]
        if isinstance(locs, _Stub):  # slice(start, stop, step)
            start, stop, step = (list(locs.args) + [None, None])[:3]
            positions: Any = range(start or 0, stop, step or 1)
        else:
            positions = list(locs)
        for pos, column_values in zip(positions, values):
            by_position[pos] = column_values
    if sorted(by_position) != list(range(len(columns))):
        raise pickle.UnpicklingError(f"blocks cover columns {sorted(by_position)}, the frame has {len(columns)}")
    return [{c: by_position[i][r] for i, c in enumerate(columns)} for r in range(n_rows)]

"""What the XLA HLO dump of an ``nsys-jax`` archive says about each collective: its
operands' size and element type, and its replica groups.

The dump holds ``xla.HloProto`` messages (``dump/module_<id>.<name>.<...>after_optimizations
.hlo.pb``, xz-compressed). Only the few fields read here are decoded, straight from the
protobuf wire format (no XLA or protobuf package needed); the field numbers are those of
``xla/service/hlo.proto`` and ``xla/xla_data.proto`` (openxla/xla):

- ``HloProto.hlo_module`` 1 -> ``HloModuleProto.computations`` 3 ->
  ``HloComputationProto.instructions`` 2;
- ``HloInstructionProto``: ``name`` 1, ``opcode`` 2, ``shape`` 3, ``id`` 35,
  ``operand_ids`` 36, ``replica_groups`` 49 (``ReplicaGroup.replica_ids`` 1);
- ``ShapeProto``: ``element_type`` 2, ``dimensions`` 3, ``tuple_shapes`` 4.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

from ...ingest.values import fits_int64
from ...vocab import DTYPE_SIZES

#: xla.PrimitiveType -> the dataset's dtype name (its size: vocab.DTYPE_SIZES); TUPLE (13)
#: and TOKEN (17) are no arrays.
ELEMENT_TYPES: dict[int, str] = {
    1: "bool",
    2: "int8",
    3: "int16",
    4: "int32",
    5: "int64",
    6: "uint8",
    7: "uint16",
    8: "uint32",
    9: "uint64",
    10: "float16",
    11: "float32",
    12: "float64",
    15: "complex64",
    16: "bfloat16",
    18: "complex128",
    19: "float8_e5m2",
    20: "float8_e4m3fn",
    24: "float8_e5m2fnuz",
    25: "float8_e4m3fnuz",
}
_MAX_DEPTH = 16


class HloError(ValueError):
    """A dump that is not a readable HloProto."""


@dataclass
class Instruction:
    """One HLO instruction, as far as tokenwire reads it."""

    name: str
    opcode: str
    id: int | None
    operand_ids: list[int]
    #: the ShapeProto, decoded by :meth:`arrays` for the few instructions that need it
    shape: bytes
    replica_groups: list[list[int]]

    def arrays(self) -> list[tuple[int, int]]:
        """(element type, element count) of each array in the shape (a tuple's,
        flattened)."""
        return _arrays(self.shape, 0)


def instructions(data: bytes) -> Iterator[Instruction]:
    """Every instruction of every computation of the HloProto ``data``."""
    for field, value in _fields(data):
        if field == 1 and isinstance(value, bytes):
            for f, computation in _fields(value):
                if f == 3 and isinstance(computation, bytes):
                    for g, inst in _fields(computation):
                        if g == 2 and isinstance(inst, bytes):
                            yield _instruction(inst)


def array_bytes(arrays: list[tuple[int, int]]) -> tuple[int | None, int | None, str | None]:
    """(elements, bytes, dtype) of ``arrays``; bytes is None where an element type is not
    known, dtype is None where the arrays have several."""
    types = {t for t, _ in arrays}
    elements = sum(n for _, n in arrays)
    if not fits_int64(elements * 16):  # (a damaged shape: no count or size is known)
        return None, None, None
    if not arrays or any(t not in ELEMENT_TYPES for t in types):
        return (elements if arrays else None), None, None
    size = sum(n * DTYPE_SIZES[ELEMENT_TYPES[t]] for t, n in arrays)
    dtype = ELEMENT_TYPES[types.pop()] if len(types) == 1 else None
    return elements, size, dtype


def _instruction(data: bytes) -> Instruction:
    inst = Instruction("", "", None, [], b"", [])
    for field, value in _fields(data):
        if field == 1 and isinstance(value, bytes):
            inst.name = value.decode("utf-8", "replace")
        elif field == 2 and isinstance(value, bytes):
            inst.opcode = value.decode("utf-8", "replace")
        elif field == 3 and isinstance(value, bytes):
            inst.shape = value
        elif field == 35 and isinstance(value, int):
            inst.id = value
        elif field == 36:
            inst.operand_ids.extend(_packed(value))
        elif field == 49 and isinstance(value, bytes):
            inst.replica_groups.append([i for f, v in _fields(value) if f == 1 for i in _packed(v)])
    return inst


def _arrays(shape: bytes, depth: int) -> list[tuple[int, int]]:
    if depth > _MAX_DEPTH:
        raise HloError(f"shapes nested deeper than {_MAX_DEPTH} levels")
    element_type, dims, tuples = 0, [], []
    for field, value in _fields(shape):
        if field == 2 and isinstance(value, int):
            element_type = value
        elif field == 3:
            dims.extend(_packed(value))
        elif field == 4 and isinstance(value, bytes):
            tuples.extend(_arrays(value, depth + 1))
    if element_type in (13, 17, 0) or tuples:
        return tuples
    return [(element_type, math.prod(dims))]


def _packed(value: int | bytes) -> list[int]:
    """A repeated integer field's values: one varint, or a packed run of them."""
    if isinstance(value, int):
        return [value]
    out, i = [], 0
    while i < len(value):
        v, i = _varint(value, i)
        out.append(v)
    return out


def _varint(data: bytes, i: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if i >= len(data) or shift > 63:
            raise HloError("a varint runs past its message")
        byte = data[i]
        i += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, i
        shift += 7


def _fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) of a message: varints as int, length-delimited as bytes
    (fixed-width values are skipped)."""
    i, n = 0, len(data)
    while i < n:
        key, i = _varint(data, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(data, i)
            yield field, value
        elif wire == 2:
            length, i = _varint(data, i)
            if i + length > n:
                raise HloError("a field runs past its message")
            yield field, data[i : i + length]
            i += length
        elif wire in (1, 5):
            i += 8 if wire == 1 else 4
        else:
            raise HloError(f"wire type {wire} is not one of protobuf's")

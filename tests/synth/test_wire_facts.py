"""The sample generator's own statement of element sizes, ring bytes and NCCL's names
(pipeline/synth/wire.py, from their public sources) agrees with the package's vocabulary:
two statements written apart, so a wrong number in either fails here, not silently in a
sample that was made from the other."""

from __future__ import annotations

import pytest

from pipeline.synth.job import DTYPE
from pipeline.synth.wire import ELEMENT_BYTES, NCCL_FUNCS, ring_bytes_per_byte
from pipeline.vocab import DTYPES, OP_NAMES, bus_factor


def test_the_generators_element_sizes_are_the_vocabularys() -> None:
    # each torch dtype by the name its record_param_comms events give it
    for key, (rpc_dtype, *_) in DTYPE.items():
        assert DTYPES[rpc_dtype.lower()][1] == ELEMENT_BYTES[key], key


@pytest.mark.parametrize("op", ["all_reduce", "all_gather", "reduce_scatter", "broadcast",
                                "send", "recv"])  # fmt: skip
def test_the_generators_ring_bytes_are_nccl_tests_bus_factor(op: str) -> None:
    for n in (1, 2, 3, 4, 8, 512):
        assert ring_bytes_per_byte(op, n) == pytest.approx(bus_factor(op, n), rel=1e-15)


def test_hand_values_of_the_ring_bytes() -> None:
    # nccl-tests doc/PERFORMANCE.md: all-reduce 2(n-1)/n, all-gather (n-1)/n, broadcast 1
    assert ring_bytes_per_byte("all_reduce", 4) == 1.5
    assert ring_bytes_per_byte("all_gather", 8) == 0.875
    assert ring_bytes_per_byte("broadcast", 8) == 1.0
    with pytest.raises(ValueError):
        ring_bytes_per_byte("all_to_all", 8)


def test_the_generators_nccl_names_are_the_vocabularys() -> None:
    assert {op: OP_NAMES[func] for op, func in NCCL_FUNCS.items()} == {op: op for op in NCCL_FUNCS}

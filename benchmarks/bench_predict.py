"""``tokenwire predict`` at any scale: one rank's prediction for layouts of a thousand to a
billion ranks, next to listing that rank's data-parallel group member by member (what the
model did before working out communicators in closed form; listed only up to ``--list-max``
ranks, a billion members would take hours and gigabytes).

Each layout is Llama 3 8B, TP 8 x PP 16 x DP ``n / 128``; the last rank is predicted, the
median of ``--repeat`` runs printed.
"""

from __future__ import annotations

import argparse
import statistics
import time

from pipeline.model.config import build_job
from pipeline.model.predict import group, predict

WORLDS = (2**10, 2**14, 2**20, 2**24, 2**30)


def _median_s(fn, repeat: int) -> float:  # noqa: ANN001
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> None:
    """Time predict at each world size, and the member listing where it is affordable."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--list-max", type=int, default=2**20, help="largest world listed")
    args = parser.parse_args(argv)
    print("== predict, one rank (closed form) / listing its DP group's members")
    for world in WORLDS:
        dp = world // 128
        job = build_job(None, {"model.preset": "llama3-8b", "parallel.tp": 8, "parallel.pp": 16,
                               "parallel.dp": dp, "batch.global_batch": dp})  # fmt: skip
        rank = world - 1
        ours = _median_s(lambda j=job, r=rank: predict(j, r), args.repeat)
        # (what each side found: the DP group's size in the prediction, its members listed)
        size = {r.group_size for r in predict(job, rank).rows if r.parallel_dim == "dp"}
        if world <= args.list_max:
            base = _median_s(lambda j=job, r=rank: group(j, r, ("dp", "cp")), 1)
            members = len(group(job, rank, ("dp", "cp")))
            listed = f"{base:9.4f} s listing the group ({members:,} members)"
        else:
            listed = "(group not listed)"
        print(
            f"  {world:>13,} ranks  {ours * 1e3:8.3f} ms predict "
            f"(DP group of {', '.join(f'{n:,}' for n in sorted(size))})   {listed}"
        )


if __name__ == "__main__":
    main()

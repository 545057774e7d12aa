"""The cube job on the driver: Spark builds a segment, then one fenced MVCC multi publishes it.

The order is Kylin's: compute and write the Parquet files first (nobody references them
yet), then commit the metadata atomically.  A driver that dies in between leaves orphan
files and the old metadata; a driver that lost its epoch meanwhile is refused at commit.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from collections.abc import Callable
from typing import Any

from .cube import BuildOutput, ProgressBar, build_segment, merge_segment_files
from .metastore import CommitResult, MetaStore
from .model import CubeDesc, ModelDesc, Segment, new_uuid, segment_name

log = logging.getLogger("zabby.spark.job")
FAULT_ENV = "ZABBY_KYLIN_FAULT"  # test hook: "exit-before-commit" ends the process after Spark, before the commit


@dataclasses.dataclass
class StepReport:
    action: str  # BUILD | MERGE
    segment: Segment
    commit: CommitResult
    t_spark_start: float  # wall clock
    t_spark_end: float
    job_id: str

    @property
    def spark_seconds(self) -> float:
        return self.t_spark_end - self.t_spark_start

    @property
    def commit_seconds(self) -> float:
        return self.commit.seconds

    def to_dict(self) -> dict[str, Any]:
        return {
            "action": self.action, "segment": self.segment.uuid, "name": self.segment.name,
            "start": self.segment.date_range_start, "end": self.segment.date_range_end,
            "rows": self.segment.row_count, "input_records": self.segment.input_records,
            "cuboids": self.segment.cuboid_count, "size_bytes": self.segment.size_bytes,
            "t_spark_start": self.t_spark_start, "t_spark_end": self.t_spark_end,
            "spark_seconds": self.spark_seconds, "t_commit_sent": self.commit.t_sent, "t_commit_acked": self.commit.t_acked,
            "commit_seconds": self.commit_seconds, "zxid": self.commit.zxid, "attempts": self.commit.attempts,
            "merged_from": self.segment.merged_from, "job_id": self.job_id,
        }  # fmt: skip


class CubeJob:
    """Builds and merges segments of one cube; ``source(start, end)`` gives the fact rows."""

    def __init__(self, spark: Any, store: MetaStore, desc: CubeDesc, model: ModelDesc | None, storage: str,
                 source: Callable[[str, str], Any], *, progress: bool = True,
                 after_spark: Callable[[Segment], None] | None = None) -> None:  # fmt: skip
        self.spark = spark
        self.store = store
        self.desc = desc
        self.model = model
        self.storage = storage.rstrip("/")
        self.source = source
        self.progress = progress
        self.after_spark = after_spark  # test hook: runs between Spark and the commit

    def segment_path(self, seg_id: str) -> str:
        return f"{self.storage}/{self.store.layout.project}/{self.desc.name}/{seg_id}"

    def _spark(self, label: str, job_id: str, fn: Callable[[], BuildOutput]) -> tuple[BuildOutput, float, float]:
        t0 = time.time()
        if self.progress:
            with ProgressBar(self.spark, job_id, label):
                out = fn()
        else:
            self.spark.sparkContext.setJobGroup(job_id, label)
            out = fn()
        return out, t0, time.time()

    def _before_commit(self, segment: Segment) -> None:
        if os.environ.get(FAULT_ENV) == "exit-before-commit":
            log.warning("%s=exit-before-commit: exiting after Spark, before the metadata commit", FAULT_ENV)
            os._exit(75)
        if self.after_spark is not None:
            self.after_spark(segment)

    def build(self, start: str, end: str) -> StepReport:
        job_id, seg_id = new_uuid(), new_uuid()
        path = self.segment_path(seg_id)
        name = segment_name(start, end)
        out, t0, t1 = self._spark(f"build {name[:8]}..{name[15:23]}", job_id,
                                  lambda: build_segment(self.spark, self.source(start, end), self.desc, self.model, path))  # fmt: skip
        segment = Segment(
            uuid=seg_id, name=name, date_range_start=start, date_range_end=end, input_records=out.input_records,
            row_count=out.row_count, cuboid_count=out.cuboid_count, size_bytes=out.size_bytes, storage_path=path,
            build_seconds=round(t1 - t0, 3), last_build_job_id=job_id, cuboid_rows=out.cuboid_rows,
        )  # fmt: skip
        self._before_commit(segment)
        commit = self.store.add_segment(self.desc.name, segment, job_id)
        log.info("committed %s at zxid 0x%x", name, commit.zxid)
        return StepReport("BUILD", segment, commit, t0, t1, job_id)

    def merge(self, segment_ids: list[str] | None = None) -> StepReport:
        """Merge ``segment_ids`` (default: every ready segment) into one segment."""
        cube = self.store.read_cube(self.desc.name).doc
        refs = [s for s in cube.ready_segments() if segment_ids is None or s.id in segment_ids]
        if len(refs) < 2:
            raise ValueError(f"nothing to merge: {len(refs)} ready segment(s)")
        refs.sort(key=lambda s: s.date_range_start)
        job_id, seg_id = new_uuid(), new_uuid()
        path = self.segment_path(seg_id)
        start, end = refs[0].date_range_start, refs[-1].date_range_end
        name = segment_name(start, end)
        inputs = sum(s.input_records for s in refs)
        out, t0, t1 = self._spark(f"merge {len(refs)} segments", job_id,
                                  lambda: merge_segment_files(self.spark, self.desc, [s.storage_path for s in refs], path, inputs))  # fmt: skip
        segment = Segment(
            uuid=seg_id, name=name, date_range_start=start, date_range_end=end, input_records=inputs,
            row_count=out.row_count, cuboid_count=out.cuboid_count, size_bytes=out.size_bytes, storage_path=path,
            build_seconds=round(t1 - t0, 3), last_build_job_id=job_id, merged_from=[s.id for s in refs],
            cuboid_rows=out.cuboid_rows,
        )  # fmt: skip
        self._before_commit(segment)
        commit = self.store.merge_segments(self.desc.name, segment, job_id)
        log.info("committed merge %s at zxid 0x%x", name, commit.zxid)
        return StepReport("MERGE", segment, commit, t0, t1, job_id)


def main(argv: list[str] | None = None) -> int:
    """One build of the sales cube from the command line (``python -m zabby.spark.job``)."""
    import argparse

    from zabby import SyncClient

    from .cube import SalesSpec, generate_sales, spark_session
    from .epoch import ProjectEpoch
    from .model import Layout, sales_cube_desc, sales_model, sales_project

    parser = argparse.ArgumentParser(description="build one segment of the sales cube and commit it into zabby")
    parser.add_argument("--hosts", required=True)
    parser.add_argument("--project", default="demo")
    parser.add_argument("--storage", required=True)
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--days", type=int, default=60)
    parser.add_argument("--start", required=True)
    parser.add_argument("--end", required=True)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    client = SyncClient(args.hosts, timeout=4.0)
    client.start()
    layout = Layout(args.project)
    epoch = ProjectEpoch(client, layout)
    spark = None
    try:
        epoch.acquire(timeout=30)
        store = MetaStore(client, layout, epoch)
        desc, model = sales_cube_desc(), sales_model()
        if store.read_cube(desc.name).version < 0:
            store.init_project(sales_project(args.project), model, desc, args.storage)
        spark = spark_session(args.master, "zabby-job", shuffle_partitions=2, driver_memory="1g")
        spec = SalesSpec(rows=args.rows, days=args.days)
        job = CubeJob(spark, store, desc, model, args.storage, lambda a, b: generate_sales(spark, spec, a, b, 2), progress=False)
        report = job.build(args.start, args.end)
        print(json.dumps(report.to_dict()), flush=True)
        return 0
    finally:
        if spark is not None:
            spark.stop()
        epoch.release()
        client.stop()
        client.close()


if __name__ == "__main__":
    import sys

    sys.exit(main())

"""The Spark side: the sales fact table, cuboid builds and segment merges, Parquet out.

The fact table is a pure function of (seed, rows, start date, days): row ``id`` falls on day
``id * days // rows`` and every attribute is a hash of (id, seed, attribute), so a segment
(a date range) generates exactly its slice with ``spark.range(lo, hi)`` — the union of the
segments is the table, whatever the partitioning.  Or read Parquet/CSV paths instead.

A build is two Spark aggregations: the base cuboid (every dimension) straight from the
facts, then every cuboid the aggregation groups ask for from it, in one ``groupingSets``
(re-aggregating: sums of sums, min of mins, union of HyperLogLog sketches).  Distinct counts
are kept as HLL sketches (``hll_sketch_agg``) so that segments can be merged exactly as they
were built; ``<measure>`` holds the estimate.  A merge re-aggregates its segments' cuboids.
Executors never talk to zabby: only the driver commits the result's metadata.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import os
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from .model import CubeDesc, ModelDesc

REGIONS = {
    "EMEA": ["Germany", "France", "United Kingdom", "Spain", "Italy", "Netherlands", "South Africa"],
    "AMER": ["United States", "Canada", "Brazil", "Mexico", "Argentina"],
    "APAC": ["China", "Japan", "India", "Australia", "Singapore", "Korea"],
    "MEA": ["UAE", "Saudi Arabia", "Egypt"],
}
REGION_WEIGHTS = [0.34, 0.36, 0.24, 0.06]
CATEGORIES = {
    "Electronics": (["Phone", "Laptop", "Tablet", "Headphones", "Camera", "Monitor"], 420.0),
    "Home": (["Lamp", "Chair", "Desk", "Rug", "Kettle"], 60.0),
    "Grocery": (["Coffee", "Tea", "Olive Oil", "Chocolate", "Pasta"], 8.0),
    "Apparel": (["Jacket", "Sneakers", "T-Shirt", "Jeans", "Scarf"], 45.0),
    "Sports": (["Bike", "Racket", "Yoga Mat", "Football", "Helmet"], 80.0),
    "Books": (["Novel", "Cookbook", "Atlas", "Comic", "Textbook"], 18.0),
    "Toys": (["Puzzle", "Blocks", "Doll", "Kite", "Board Game"], 25.0),
    "Beauty": (["Perfume", "Lipstick", "Shampoo", "Cream", "Soap"], 22.0),
}
CHANNELS = ["online", "retail", "partner", "phone"]
CHANNEL_WEIGHTS = [0.45, 0.35, 0.12, 0.08]
CUSTOMERS = 250_000


def spark_session(master: str = "local[*]", app: str = "zabby-cube", shuffle_partitions: int = 4,
                  driver_memory: str = "1g", extra: dict[str, str] | None = None) -> Any:  # fmt: skip
    """A SparkSession tuned for a small machine: no UI, few shuffle partitions, quiet logs."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(master).appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.default.parallelism", str(max(2, shuffle_partitions)))
        .config("spark.driver.memory", driver_memory)
        .config("spark.sql.adaptive.enabled", "true")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.extraJavaOptions", "-Dlog4j2.level=ERROR -Dlog4j.rootLogger=ERROR")
    )  # fmt: skip
    for key, value in (extra or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


# -- the fact table -------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class SalesSpec:
    rows: int
    seed: int = 42
    start: str = "2024-01-01"
    days: int = 60

    def day(self, offset: int) -> str:
        return (dt.date.fromisoformat(self.start) + dt.timedelta(days=offset)).isoformat()

    @property
    def end(self) -> str:
        return self.day(self.days)

    def id_range(self, start: str, end: str) -> tuple[int, int]:
        """Row ids whose day is in [start, end): day(id) = id * days // rows."""
        d0 = max(0, min(self.days, (dt.date.fromisoformat(start) - dt.date.fromisoformat(self.start)).days))
        d1 = max(0, min(self.days, (dt.date.fromisoformat(end) - dt.date.fromisoformat(self.start)).days))
        return math.ceil(d0 * self.rows / self.days), math.ceil(d1 * self.rows / self.days)


def generate_sales(spark: Any, spec: SalesSpec, start: str | None = None, end: str | None = None, partitions: int = 4) -> Any:
    """The rows of the sales fact table whose sale_date is in [start, end) (default: all)."""
    from pyspark.sql import functions as F

    lo, hi = spec.id_range(start or spec.start, end or spec.end)
    ids = spark.range(lo, hi, numPartitions=max(1, partitions))

    def hashed(k: int) -> Any:  # a uniform [0, 1) per (row, seed, attribute)
        return (F.pmod(F.xxhash64(F.col("id"), F.lit(spec.seed), F.lit(k)), F.lit(1 << 30)) / float(1 << 30)).cast("double")

    def u(k: int) -> Any:
        return F.col(f"_u{k}")

    def pick(values: Sequence[Any], weights: Sequence[float] | None, k: int) -> Any:
        if weights is None:
            return F.element_at(F.array(*[F.lit(v) for v in values]), (F.floor(u(k) * len(values)) + 1).cast("int"))
        expr, acc = None, 0.0
        for value, w in zip(values, weights, strict=True):
            acc += w
            expr = F.when(u(k) < acc, F.lit(value)) if expr is None else expr.when(u(k) < acc, F.lit(value))
        return F.lit(values[-1]) if expr is None else expr.otherwise(F.lit(values[-1]))

    def nested(parent: str, table: dict[str, Any], k: int, power: float) -> Any:
        """A child value (country of a region, product of a category), skewed to the first ones."""
        expr = None
        for name, children in table.items():
            children = children[0] if isinstance(children, tuple) else children
            child = F.element_at(F.array(*[F.lit(c) for c in children]), (F.floor(F.pow(u(k), power) * len(children)) + 1).cast("int"))
            expr = F.when(F.col(parent) == name, child) if expr is None else expr.when(F.col(parent) == name, child)
        return expr

    base_price = None
    for name, (_, price) in CATEGORIES.items():
        cond = F.col("category") == name
        base_price = F.when(cond, F.lit(price)) if base_price is None else base_price.when(cond, F.lit(price))
    start_date = F.to_date(F.lit(spec.start))
    day = (F.col("id") * spec.days / spec.rows).cast("long").cast("int")
    uniforms = ids.select(F.col("id"), *[hashed(k).alias(f"_u{k}") for k in range(1, 9)])
    stage1 = uniforms.select(
        F.col("id").alias("order_id"),
        F.date_add(start_date, day).alias("sale_date"),
        pick(list(REGIONS), REGION_WEIGHTS, 1).alias("region"),
        pick(list(CATEGORIES), None, 3).alias("category"),
        pick(CHANNELS, CHANNEL_WEIGHTS, 5).alias("channel"),
        (F.floor(F.pow(u(6), 3) * 9) + 1).cast("int").alias("quantity"),
        F.floor(F.pow(u(7), 2) * CUSTOMERS).cast("long").alias("customer_id"),
        u(2), u(4), u(8),
    )  # fmt: skip
    return stage1.select(
        "order_id", "sale_date", "region", nested("region", REGIONS, 2, 1.5).alias("country"),
        "category", nested("category", CATEGORIES, 4, 2.0).alias("product"), "channel", "quantity",
        F.round(base_price * (F.lit(0.6) + u(8) * 0.8), 2).alias("price"), "customer_id",
    )  # fmt: skip


def read_source(spark: Any, paths: Sequence[str], fmt: str | None = None) -> Any:
    """Parquet or CSV (with header) fact rows; the format from ``fmt`` or the first path's suffix."""
    fmt = fmt or ("csv" if str(paths[0]).rstrip("/").endswith(".csv") else "parquet")
    reader = spark.read
    if fmt == "csv":
        reader = reader.option("header", "true").option("inferSchema", "true")
    return reader.format(fmt).load(list(paths))


def slice_dates(df: Any, column: str, start: str, end: str) -> Any:
    from pyspark.sql import functions as F

    d = F.to_date(F.col(column))
    return df.where((d >= F.lit(start).cast("date")) & (d < F.lit(end).cast("date")))


# -- cuboids -------------------------------------------------------------------------------
def _with_computed(df: Any, model: ModelDesc | None) -> Any:
    from pyspark.sql import functions as F

    for cc in (model.computed_columns if model else []):
        if cc["columnName"] not in df.columns:
            df = df.withColumn(cc["columnName"], F.expr(cc["expression"]))
    return df


def _hll_k(returntype: str) -> int:
    digits = "".join(ch for ch in returntype if ch.isdigit())
    return min(max(int(digits) if digits else 12, 4), 21)


def _raw_aggs(desc: CubeDesc) -> list[Any]:
    """Aggregations of the facts into the base cuboid (one column per measure)."""
    from pyspark.sql import functions as F

    out = []
    for m in desc.measures:
        fn = m["function"]["expression"].upper()
        param = m["function"].get("parameter", {})
        col = F.lit(1) if param.get("type") == "constant" else F.col(param["value"])
        name = m["name"]
        if fn == "COUNT":
            out.append(F.count(col).cast("long").alias(name))
        elif fn == "SUM":
            out.append(F.sum(col).alias(name))
        elif fn == "MIN":
            out.append(F.min(col).alias(name))
        elif fn == "MAX":
            out.append(F.max(col).alias(name))
        elif fn == "COUNT_DISTINCT":
            out.append(F.hll_sketch_agg(col, _hll_k(m["function"].get("returntype", ""))).alias(name + "_sketch"))
    return out


def _merge_aggs(desc: CubeDesc) -> list[Any]:
    """Aggregations of cuboid rows into coarser rows: how every measure re-aggregates."""
    from pyspark.sql import functions as F

    out = []
    for m in desc.measures:
        fn = m["function"]["expression"].upper()
        name = m["name"]
        if fn in ("COUNT", "SUM"):
            out.append(F.sum(name).alias(name))
        elif fn == "MIN":
            out.append(F.min(name).alias(name))
        elif fn == "MAX":
            out.append(F.max(name).alias(name))
        elif fn == "COUNT_DISTINCT":
            out.append(F.hll_union_agg(name + "_sketch", True).alias(name + "_sketch"))
    return out


def _estimates(df: Any, desc: CubeDesc) -> Any:
    from pyspark.sql import functions as F

    for m in desc.measures:
        if m["function"]["expression"].upper() == "COUNT_DISTINCT":
            df = df.withColumn(m["name"], F.hll_sketch_estimate(m["name"] + "_sketch"))
    return df


def cuboid_frame(base: Any, desc: CubeDesc) -> Any:
    """Every cuboid of ``desc`` in ONE groupingSets over rows at base grain; adds ``cuboid_id``
    (Kylin's dimension bitmask).  Simple, but it expands every base row once per cuboid."""
    from pyspark.sql import functions as F

    dims = desc.dimension_columns
    sets = [[F.col(d) for d in cuboid] for cuboid in desc.cuboids()]
    return _estimates(_grouping_sets(base, desc, sets, dims), desc)


def _grouping_sets(rows: Any, desc: CubeDesc, sets: list[list[Any]], dims: list[str]) -> Any:
    from pyspark.sql import functions as F

    full = (1 << len(dims)) - 1
    out = rows.groupingSets(sets, *[F.col(d) for d in dims]).agg(*_merge_aggs(desc), F.grouping_id(*dims).alias("_gid"))
    return out.withColumn("cuboid_id", (F.lit(full) - F.col("_gid")).cast("long")).drop("_gid")


@dataclasses.dataclass
class BuildOutput:
    path: str
    input_records: int
    row_count: int
    cuboid_rows: dict[str, int]
    size_bytes: int
    seconds: float

    @property
    def cuboid_count(self) -> int:
        return len(self.cuboid_rows)


def _path_size(spark: Any, path: str) -> int:
    jvm = spark.sparkContext._jvm
    hpath = jvm.org.apache.hadoop.fs.Path(path)
    fs = hpath.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    return int(fs.getContentSummary(hpath).getLength())


def _finish(spark: Any, path: str, input_records: int, t0: float) -> BuildOutput:
    from pyspark.sql import functions as F

    counts = spark.read.parquet(path).groupBy("cuboid_id").agg(F.count(F.lit(1)).alias("n")).collect()
    cuboid_rows = {str(r["cuboid_id"]): int(r["n"]) for r in sorted(counts, key=lambda r: -r["cuboid_id"])}
    return BuildOutput(path, input_records, sum(cuboid_rows.values()), cuboid_rows, _path_size(spark, path), time.monotonic() - t0)


def build_segment(spark: Any, facts: Any, desc: CubeDesc, model: ModelDesc | None, path: str, output_files: int = 2) -> BuildOutput:
    """Aggregate ``facts`` (one segment's rows) into every cuboid and write them as Parquet."""
    from pyspark.sql import functions as F

    t0 = time.monotonic()
    dims = desc.dimension_columns
    facts = _with_computed(facts, model)
    base = facts.groupBy(*[F.col(d) for d in dims]).agg(*_raw_aggs(desc), F.count(F.lit(1)).alias("_input_rows")).cache()
    try:
        input_records = int(base.agg(F.sum("_input_rows")).collect()[0][0] or 0)
        cube = cuboid_frame(base.drop("_input_rows"), desc)
        cube.coalesce(output_files).write.mode("overwrite").parquet(path)
    finally:
        base.unpersist()
    return _finish(spark, path, input_records, t0)


def merge_segment_files(spark: Any, desc: CubeDesc, paths: Sequence[str], path: str, input_records: int, output_files: int = 2) -> BuildOutput:
    """Merge segments' cuboid files into one segment: re-aggregate per (cuboid, dimensions)."""
    from pyspark.sql import functions as F

    t0 = time.monotonic()
    dims = desc.dimension_columns
    rows = spark.read.parquet(*paths)
    merged = rows.groupBy(F.col("cuboid_id"), *[F.col(d) for d in dims]).agg(*_merge_aggs(desc))
    merged = _estimates(merged, desc)
    order = [*dims, *[c for c in merged.columns if c not in dims and c != "cuboid_id"], "cuboid_id"]
    merged.select(*order).coalesce(output_files).write.mode("overwrite").parquet(path)
    return _finish(spark, path, input_records, t0)


def query_cuboid(spark: Any, desc: CubeDesc, paths: Sequence[str], columns: Sequence[str]) -> Any:
    """The rows of one cuboid over some segments (re-aggregated across them): a tiny query engine."""
    from pyspark.sql import functions as F

    cid = desc.cuboid_id(columns)
    rows = spark.read.parquet(*paths).where(F.col("cuboid_id") == cid)
    out = rows.groupBy(*[F.col(c) for c in columns]).agg(*_merge_aggs(desc))
    return _estimates(out, desc).drop(*[c for c in out.columns if c.endswith("_sketch")])


# -- progress ------------------------------------------------------------------------------
class ProgressBar:
    """Polls Spark's status tracker for the jobs of one job group and draws a bar on stderr."""

    def __init__(self, spark: Any, group: str, label: str, stream: Any = None, interval_s: float = 0.25, width: int = 32) -> None:
        self.sc = spark.sparkContext
        self.group = group
        self.label = label
        self.stream = stream or sys.stderr
        self.interval_s = interval_s
        self.width = width
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = time.monotonic()
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._last = ""
        self._last_print = 0.0

    def __enter__(self) -> ProgressBar:
        self.sc.setJobGroup(self.group, self.label, interruptOnCancel=False)
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="spark-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2)
        self._draw(final=exc[0] is None)
        self.stream.write("\n")
        self.stream.flush()
        self.sc.setLocalProperty("spark.jobGroup.id", None)

    def _counts(self) -> tuple[int, int, int, int]:
        tracker = self.sc.statusTracker()
        done = total = jobs = stages = 0
        for job_id in tracker.getJobIdsForGroup(self.group):
            info = tracker.getJobInfo(job_id)
            if info is None:
                continue
            jobs += 1
            for stage_id in info.stageIds:
                stage = tracker.getStageInfo(stage_id)
                if stage is None:
                    continue
                stages += 1
                total += stage.numTasks
                done += stage.numCompletedTasks
        return done, total, jobs, stages

    def _draw(self, final: bool = False) -> None:
        try:
            done, total, jobs, stages = self._counts()
        except Exception:
            return
        frac = 1.0 if final else (done / total if total else 0.0)
        filled = int(frac * self.width)
        bar = "#" * filled + "-" * (self.width - filled)
        body = f"  {self.label:<30} [{bar}] {frac * 100:5.1f}%  tasks {done}/{total}  jobs {jobs}  {time.monotonic() - self._t0:5.1f}s"
        if body == self._last and not final:
            return
        now = time.monotonic()
        if self.tty:
            self.stream.write("\r" + body)
        elif final or now - self._last_print >= 2.0:  # not a terminal: a line every 2 s
            self.stream.write(("\n" if self._last_print else "") + body)
            self._last_print = now
        else:
            return
        self._last = body
        self.stream.flush()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._draw()

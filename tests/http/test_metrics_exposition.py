"""/metrics of a running service after a task ran: Prometheus conventions, the queue label, the task timings."""

from __future__ import annotations

import re
from pathlib import Path

import trio
from prometheus_client.parser import text_string_to_metric_families

from metrics_support import exposition_samples

NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")
HISTOGRAM_SUFFIXES = ("_bucket", "_count", "_sum")
RUN_S = 0.2  # how long the task runs between its start and its finish
OPERATIONS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


async def _run_one_slowly(worker) -> None:
    assign = await worker.next_assignment()
    lease = assign["lease"]
    command = {k: lease[k] for k in ("task_id", "lease_id", "lease_secret", "revision")}
    started = await worker.request("task.start", command)
    await trio.sleep(RUN_S)
    command["revision"] = started["lease"]["revision"]
    await worker.request("task.finish", {**command, "status": "SUCCEEDED", "result": {"ok": True}})


def _declared(text: str) -> list[tuple[str, str]]:
    """``# TYPE name type`` lines, in order (duplicates kept)."""
    return [tuple(line.split()[2:4]) for line in text.splitlines() if line.startswith("# TYPE ")]


def lint(text: str) -> dict[str, str]:
    """Check the exposition against the Prometheus conventions; the declared families by name."""
    declared = _declared(text)
    names = [name for name, _ in declared]
    assert len(names) == len(set(names)), f"families declared twice: {sorted({n for n in names if names.count(n) > 1})}"
    types = dict(declared)
    helps = {line.split()[2] for line in text.splitlines() if line.startswith("# HELP ")}
    assert helps == set(types), "every family has exactly one HELP"
    for name, kind in types.items():
        assert NAME.match(name) and name.startswith("pulse_"), name
        assert not name.endswith("_created"), f"stray _created family {name}"
        assert kind in ("counter", "gauge", "histogram"), (name, kind)
        assert (kind == "counter") == name.endswith("_total"), f"{kind} {name}: counters, and only they, end in _total"
        if "seconds" in name or "bytes" in name:
            assert re.search(r"_(seconds|bytes)(_total)?\Z", name), f"{name}: the unit is the suffix"
    for family in text_string_to_metric_families(text):  # the client library's own parser takes all of it
        assert family.documentation, family.name
        for sample in family.samples:
            assert sample.name in types or any(
                sample.name == base + suffix for base in types if types[base] == "histogram"
                for suffix in HISTOGRAM_SUFFIXES), f"{sample.name} outside any declared family"
            assert all(LABEL.match(label) for label in sample.labels), sample
            assert sample.value >= 0 or sample.name.startswith("pulse_oldest"), sample
    return types


def _histogram(samples, name: str, labels: tuple[tuple[str, str], ...]) -> tuple[float, float, list[float]]:
    """(count, sum, cumulative bucket counts in ``le`` order) of one series."""
    buckets = sorted(((float(dict(key)["le"]), value) for (n, key), value in samples.items()
                      if n == name + "_bucket" and tuple(kv for kv in key if kv[0] != "le") == labels))
    return samples[(name + "_count", labels)], samples[(name + "_sum", labels)], [v for _, v in buckets]


async def test_the_exposition_follows_prometheus_conventions_after_a_task_ran(http, tokens, token_factory,
                                                                              open_worker):
    worker = await open_worker(token_factory("worker"), "billing")
    with trio.fail_after(10):
        await http.post("/v1/tasks", token=tokens["producer"], json_body={"queue": "billing", "kind": "k"})
        await _run_one_slowly(worker)
    text = (await http.get("/metrics")).body.decode()

    types = lint(text)
    for name, kind in (("pulse_task_queue_wait_seconds", "histogram"), ("pulse_task_run_seconds", "histogram"),
                       ("pulse_submit_to_assign_seconds", "histogram"),
                       ("pulse_store_transaction_seconds", "histogram"),
                       ("pulse_assignments_total", "counter"), ("pulse_finishes_total", "counter"),
                       ("pulse_lease_expiry_redispatches_total", "counter"),
                       ("pulse_permits_quarantined_total", "counter"),
                       ("pulse_frames_received_bytes_total", "counter"), ("pulse_frames_sent_bytes_total", "counter")):
        assert types.get(name) == kind, name

    samples = exposition_samples(text)
    billing = (("queue", "billing"),)
    assert samples[("pulse_assignments_total", billing)] == 1
    assert samples[("pulse_finishes_total", (("queue", "billing"), ("status", "SUCCEEDED")))] == 1
    count, total, buckets = _histogram(samples, "pulse_task_run_seconds", billing)
    assert count == 1 and RUN_S <= total < 10 and buckets == sorted(buckets) and buckets[-1] == count
    count, total, buckets = _histogram(samples, "pulse_task_queue_wait_seconds", billing)
    assert count == 1 and 0 <= total < 10 and buckets[-1] == count
    count, _, _ = _histogram(samples, "pulse_submit_to_assign_seconds", billing)
    assert count == 1
    # nothing expired: the families are declared, with no series yet
    assert not [key for key in samples if key[0] in ("pulse_lease_expiry_redispatches_total",
                                                     "pulse_permits_quarantined_total")]
    assert samples[("pulse_frames_received_bytes_total", ())] > samples[("pulse_frames_received_total", ())] > 0


async def test_the_exposition_lints_before_anything_happened(http):
    text = (await http.get("/metrics")).body.decode()
    types = lint(text)
    samples = exposition_samples(text)
    assert types["pulse_store_transaction_seconds"] == "histogram"
    assert samples[("pulse_store_transaction_seconds_count", ())] >= 1  # this scrape's own query
    assert ("pulse_task_run_seconds_count", (("queue", "billing"),)) not in samples


async def test_every_metric_is_documented_and_nothing_else(http):
    text = (await http.get("/metrics")).body.decode()
    served = {name for name, _ in _declared(text)}
    section = OPERATIONS.read_text("utf-8").split("\n## 6. Metrics\n", 1)[1].split("\n## ", 1)[0]
    table = "\n".join(line for line in section.splitlines() if line.startswith("| `pulse_"))
    documented = set(re.findall(r"`(pulse_[a-z_]+)`", table))
    assert served == documented, (f"not in docs/operations.md §6: {sorted(served - documented)}; "
                                  f"documented but not served: {sorted(documented - served)}")


def test_a_histogram_counts_a_value_on_a_bound_in_that_bound_s_bucket():
    from pulse_trio.server.metrics import _Histogram

    histogram = _Histogram("pulse_example_seconds", "An example.", (0.1, 1), ["queue"])
    for value in (0.1, 0.5, 1.0, 7.0):
        histogram.observe(value, "q")
    (sample_set,) = [histogram.family()]
    samples = {(s.name, s.labels.get("le")): s.value for s in sample_set.samples}
    assert samples[("pulse_example_seconds_bucket", "0.1")] == 1
    assert samples[("pulse_example_seconds_bucket", "1.0")] == 3
    assert samples[("pulse_example_seconds_bucket", "+Inf")] == 4
    assert samples[("pulse_example_seconds_count", None)] == 4 and samples[("pulse_example_seconds_sum", None)] == 8.6
    assert histogram.count("q") == 4 and histogram.count("other") == 0


async def test_fairness_keys_are_labels_for_the_ten_with_most_ready_work_then_other(http, tokens):
    for i in range(13):
        for _ in range(13 - i):
            reply = await http.post("/v1/tasks", token=tokens["producer"],
                                    json_body={"queue": "billing", "kind": "k", "fairness_key": f"tenant-{i:02}"})
            assert reply.status == 201
    text = (await http.get("/metrics")).body.decode()
    lint(text)
    ready = {s.labels["fairness_key"]: s.value for family in text_string_to_metric_families(text)
             if family.name == "pulse_fairness_ready_tasks" for s in family.samples if s.labels["queue"] == "billing"}
    assert ready == {**{f"tenant-{i:02}": 13 - i for i in range(10)}, "other": 3 + 2 + 1}


async def test_a_fairness_key_named_other_is_counted_in_the_other_row_once(http, tokens):
    """`other` is a valid key: with the most READY work it still joins the summed row, no series twice."""
    plan = {"other": 20, **{f"tenant-{i:02}": 12 - i for i in range(11)}}
    for key, n in plan.items():
        for _ in range(n):
            reply = await http.post("/v1/tasks", token=tokens["producer"],
                                    json_body={"queue": "billing", "kind": "k", "fairness_key": key})
            assert reply.status == 201
    text = (await http.get("/metrics")).body.decode()
    lint(text)
    ready = [(s.labels["fairness_key"], s.value) for family in text_string_to_metric_families(text)
             if family.name == "pulse_fairness_ready_tasks" for s in family.samples if s.labels["queue"] == "billing"]
    assert sorted(ready) == sorted([*((f"tenant-{i:02}", 12 - i) for i in range(10)), ("other", 20 + 2)])
    rows = (await http.get("/v1/overview", token=tokens["producer"])).json()["queues"]["billing"]["fairness"]
    assert [row["fairness_key"] for row in rows].count("other") == 1


async def test_made_up_methods_do_not_grow_the_request_metric(service):
    """Any token parses as a method, and no token is needed: the label takes HTTP's methods and OTHER."""
    import socket

    def send(request: bytes) -> bytes:
        with socket.create_connection(("127.0.0.1", service.http_port), timeout=5) as s:
            s.sendall(request)
            data = b""
            while chunk := s.recv(65536):
                data += chunk
            return data

    def flood() -> None:
        for n in range(50):
            send(f"X{n:04d}METHOD /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())

    await trio.to_thread.run_sync(flood)
    exposition = (await trio.to_thread.run_sync(
        send, b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")).decode()
    methods = set(re.findall(r'^pulse_http_requests_total\{[^}]*method="([^"]*)"', exposition, re.M))
    assert "OTHER" in methods and not {m for m in methods if m.startswith("X")}, sorted(methods)

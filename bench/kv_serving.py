#!/usr/bin/env python3
"""KV policies under one memory budget, served: throughput of concurrent long generations.

Starts `frugal serve` once per configuration with a KV page pool of --kv-memory bytes (by default
25% of what `parallel` sequences of prompt + generated tokens need with the full cache), sends
`requests` completions at once (each: the same kind of prompt, `max_tokens` generated, greedy,
ignore_eos) with the KV policy and budget as per-request fields, and reports generated tokens per
second, mean and p95 latency, time to first token (streamed), and the preemptions and pool usage
/metrics shows. Every configuration sees the same requests and the same pool.

Usage: bench/kv_serving.py --frugal build/bin/frugal -m models/default.gguf [--parallel 16]
         [--requests 32] [--max-tokens 1024] [--budget 0.25] [--policies full,random,snapkv,h2o,rkv]
         [--memory-fraction 0.25] [--threads N] [--device cuda] [--kv-buffer N] [--json out.json]
         [--tasks passkey,kv_recall,... --task-n 40 --task-length 256]

With --tasks the requests are testbed examples (`frugal tasks`, test split, --task-n per family)
decoded greedily until the model stops (no ignore_eos), and every configuration also reports the
share answered correctly (the eval harness's rule: the first line starting with "A:") with a 95%
Wilson interval: speed and accuracy from the same runs.

On the GPU (--device cuda) the cache is the device's own, one slot of --ctx tokens per parallel
sequence: pass --memory-fraction 0 (no --kv-memory) to compare policies by the rows each step
reads rather than by a pool they share; the peak KV rows each request held come from its record.
"""
import argparse
import http.client
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

from kv_sweep_report import wilson  # the interval every KV accuracy table uses (bench/ is on sys.path)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def open_with_retries(req, timeout, retries):
    """urlopen, retrying a connection the server reset or dropped before answering (a burst of
    connections can overflow its listen backlog); returns (response, retries used)."""
    for attempt in range(6):
        try:
            return urllib.request.urlopen(req, timeout=timeout), attempt
        except (ConnectionResetError, ConnectionRefusedError, http.client.RemoteDisconnected) as e:
            err = e
        except urllib.error.URLError as e:
            if not isinstance(e.reason, (ConnectionResetError, ConnectionRefusedError)):
                raise
            err = e
        time.sleep(0.2 * (attempt + 1))
    raise err


def post_stream(url, body, timeout):
    """Streams one completion; returns (first-token time, end time, completion tokens, retries, text,
    the most K/V bytes the request held at once: its record's kv_peak_bytes, in the usage chunk)."""
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    t0 = time.monotonic()
    first = None
    tokens = 0
    peak = None
    text = []
    resp, retries = open_with_retries(req, timeout, 5)
    with resp as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            ev = json.loads(data)
            if ev.get("choices") and ev["choices"][0].get("text"):
                text.append(ev["choices"][0]["text"])
                if first is None:
                    first = time.monotonic()
            if ev.get("usage"):
                tokens = ev["usage"].get("completion_tokens", tokens)
            if ev.get("timings"):
                peak = ev["timings"].get("kv_peak_bytes", peak)
    end = time.monotonic()
    return (first or end) - t0, end - t0, tokens, retries, "".join(text), peak


def final_answer(completion):
    """The eval harness's rule (src/frugal/eval/score.h): the first line starting with "A:" once its
    leading spaces and tabs are removed; the rest of it without surrounding space, tab or CR."""
    for line in completion.split("\n"):
        line = line.lstrip(" \t")
        if line.startswith("A:"):
            return line[2:].strip(" \t\r")
    return None


def load_tasks(args):
    examples = []
    for family in args.tasks.split(","):
        out = subprocess.run([args.frugal, "tasks", "--family", family, "--n", str(args.task_n), "--split", "test",
                              "--length", str(args.task_length)], capture_output=True, text=True, check=True).stdout
        examples += [json.loads(line) for line in out.splitlines() if line.strip()]
    return examples


def metric(text, name):
    m = re.search(r"^" + re.escape(name) + r"\{[^}]*\} ([0-9.e+-]+)$", text, re.M)
    return float(m.group(1)) if m else None


def run_config(args, policy, memory, port):
    cmd = [args.frugal, "serve", "-m", args.model, "--port", str(port), "--parallel", str(args.parallel),
           "--kv-memory", str(memory), "-c", str(args.ctx)]
    if args.threads:
        cmd += ["-t", str(args.threads)]
    if memory <= 0:
        cmd = cmd[:cmd.index("--kv-memory")] + cmd[cmd.index("--kv-memory") + 2:]
    if args.device:
        cmd += ["--device", args.device]
    if args.kv_buffer:
        cmd += ["--kv-buffer", str(args.kv_buffer)]
    # Every request is sent at once: the queue must hold those not yet running.
    cmd += ["--max-queue", str(max(64, len(args.examples) or args.requests))]
    log = open(f"{args.server_log}.{policy}", "w") if args.server_log else None
    srv = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log or subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(base + "/health", timeout=1).read()
                break
            except Exception:
                if srv.poll() is not None:
                    raise RuntimeError(f"serve exited: {srv.stderr.read() if srv.stderr else 'see ' + log.name}")
                time.sleep(0.1)
        # The name the server gives the model (its file's stem).
        model_id = json.loads(urllib.request.urlopen(base + "/v1/models", timeout=10).read())["data"][0]["id"]
        n_requests = len(args.examples) if args.examples else args.requests
        results = [None] * n_requests
        errors = []

        def one(i):
            prompt = args.examples[i]["prompt"] if args.examples else args.prompt_text + f" ({i})"
            body = {"model": model_id, "prompt": prompt, "max_tokens": args.max_tokens, "temperature": 0,
                    "ignore_eos": not args.examples, "stream": True, "stream_options": {"include_usage": True}}
            if policy != "full":
                body["kv_policy"] = policy
                body["kv_budget"] = args.budget
            try:
                results[i] = post_stream(base + "/v1/completions", body, args.timeout)
            except urllib.error.HTTPError as e:
                errors.append(f"{policy} request {i}: {e}: {e.read().decode(errors='replace')}")
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(f"{policy} request {i}: {e}")

        t0 = time.monotonic()
        threads = [threading.Thread(target=one, args=(i,)) for i in range(n_requests)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.monotonic() - t0
        metrics = urllib.request.urlopen(base + "/metrics", timeout=10).read().decode()
    finally:
        srv.terminate()
        srv.wait(timeout=30)
        if log:
            log.close()
    if errors:
        raise RuntimeError("; ".join(errors[:3]))
    done = [r for r in results if r]
    accuracy = None
    if args.examples:
        correct = sum(1 for ex, r in zip(args.examples, results) if r and final_answer(r[4]) == ex["final_answer"])
        lo, hi = wilson(correct, len(args.examples))
        accuracy = {"correct": correct, "n": len(args.examples), "rate": correct / len(args.examples), "ci95": [lo, hi]}
    lat = sorted(r[1] for r in done)
    ttft = [r[0] for r in done]
    tokens = sum(r[2] for r in done)
    return {
        "policy": policy,
        "requests": len(done),
        "generated_tokens": tokens,
        "wall_s": wall,
        "tok_per_s": tokens / wall,
        "mean_latency_s": statistics.mean(lat),
        "p95_latency_s": lat[min(len(lat) - 1, int(0.95 * len(lat)))],
        "mean_ttft_s": statistics.mean(ttft),
        "tpot_ms": 1e3 * statistics.mean((r[1] - r[0]) / max(r[2] - 1, 1) for r in done),
        "preemptions": metric(metrics, "vllm:num_preemptions_total"),
        "connection_retries": sum(r[3] for r in done),
        "accuracy": accuracy,
        "pool_pages": metric(metrics, "frugal:kv_pool_pages"),
        # The engine thread's time in eviction rounds (selection, statistics, the keeps), summed over
        # the finished requests: rounds run between steps, so this time adds to the steps'.
        "eviction_rounds": metric(metrics, "frugal:kv_eviction_rounds_total"),
        "eviction_s": metric(metrics, "frugal:kv_eviction_seconds_total"),
        "engine_steps": metric(metrics, "frugal:engine_steps_total"),
        # K/V bytes each request held at most (its record), and their sum: what the sequences
        # needed at their peaks, whatever the device reserved for their slots.
        "kv_peak_bytes_mean": statistics.mean(r[5] for r in done) if all(r[5] is not None for r in done) else None,
        "kv_peak_bytes_sum": sum(r[5] for r in done) if all(r[5] is not None for r in done) else None,
    }


def stop_on_sigterm(signum, frame):
    """A caller's time limit (timeout(1) sends SIGTERM): leave through the finally blocks, so the
    server started for the running configuration is stopped instead of outliving this script."""
    print("kv_serving: stopped by SIGTERM (time limit) before the configuration finished", file=sys.stderr, flush=True)
    sys.exit(124)


def main():
    signal.signal(signal.SIGTERM, stop_on_sigterm)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frugal", default="build/bin/frugal")
    ap.add_argument("-m", "--model", default="models/default.gguf")
    ap.add_argument("--parallel", type=int, default=16)
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=1024)
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--budget", type=float, default=0.25, help="kv_budget of the evicting policies")
    ap.add_argument("--memory-fraction", type=float, default=0.25,
                    help="pool = this fraction of parallel x (prompt + max_tokens) tokens of full cache")
    ap.add_argument("--policies", default="full,random,snapkv,h2o,rkv")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--device", default="", help="e.g. cuda (default: the cpu backend)")
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--json")
    ap.add_argument("--server-log", help="write each server's stderr to this path + .POLICY")
    ap.add_argument("--kv-buffer", type=int, default=0, help="the server's --kv-buffer (0: its default)")
    ap.add_argument("--tasks", default="", help="testbed families whose test examples are the requests")
    ap.add_argument("--task-n", type=int, default=40)
    ap.add_argument("--task-length", type=int, default=256)
    ap.add_argument("--prompt-text", default="Once upon a time there was a little red fox who lived in the woods")
    args = ap.parse_args()
    args.examples = load_tasks(args) if args.tasks else []

    info = subprocess.run([args.frugal, "info", "-m", args.model], capture_output=True, text=True).stdout
    def key(name):
        m = re.search(r"\." + name + r"\s+u32\s+(\d+)", info)
        return int(m.group(1)) if m else None
    n_layer, n_head, n_kv = key("block_count"), key("attention.head_count"), key("attention.head_count_kv")
    n_embd = key("embedding_length")
    if None in (n_layer, n_head, n_embd):
        sys.exit("kv_serving: could not read the model shape from `frugal info`")
    n_kv = n_kv or n_head
    head_dim = n_embd // n_head
    per_token = n_layer * n_kv * head_dim * 2 * 2  # f16 K and V
    trace = (max(ex["tokens"] for ex in args.examples) if args.examples else 32) + args.max_tokens
    memory = int(args.memory_fraction * args.parallel * trace * per_token)
    pool = (f"pool {memory} bytes = {args.memory_fraction:.0%} of {args.parallel} x {trace} tokens" if memory > 0
            else f"no kv-memory: {args.parallel} slots of {args.ctx} tokens")
    print(f"model {args.model}: {n_layer} layers x {n_kv} KV heads x {head_dim}; {per_token} KV bytes/token; "
          f"{pool}; device {args.device or 'cpu'}; "
          f"{len(args.examples) or args.requests} requests x {args.max_tokens} tokens at most, budget {args.budget}")
    rows = []
    for policy in args.policies.split(","):
        r = run_config(args, policy, memory, free_port())
        rows.append(r)
        print(f"{policy:8s} {r['tok_per_s']:9.1f} tok/s  wall {r['wall_s']:7.1f} s  latency mean {r['mean_latency_s']:6.1f} "
              f"p95 {r['p95_latency_s']:6.1f} s  TTFT {r['mean_ttft_s']:6.2f} s  TPOT {r['tpot_ms']:6.1f} ms  "
              f"preemptions {r['preemptions'] or 0:.0f}  connection retries {r['connection_retries']}"
              + (f"  peak KV/request {r['kv_peak_bytes_mean'] / 2**20:.1f} MiB" if r["kv_peak_bytes_mean"] else "")
              + (f"  rounds {r['eviction_rounds']:.0f} ({r['eviction_s']:.1f} s)" if r["eviction_rounds"] else "")
              + (f"  accuracy {r['accuracy']['rate']:.3f} [{r['accuracy']['ci95'][0]:.3f}, {r['accuracy']['ci95'][1]:.3f}]"
                 f" n={r['accuracy']['n']}" if r["accuracy"] else ""), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"memory_bytes": memory, "args": vars(args), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()

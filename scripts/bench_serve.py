#!/usr/bin/env python3
"""Serving benchmark: `m3 serve` under N concurrent streaming clients at --parallel 1, 2 and 4.

For each setting the same workload runs against a fresh server: CLIENTS clients, each sending
REQUESTS chat requests in a row (distinct prompts, greedy, fixed max_tokens, ignore_eos so every
request generates exactly that many tokens). Prints a markdown table: requests/s, time to first
token (mean and p90), aggregate generated tokens/s, and per-stream decode tokens/s.

  /usr/bin/python3 scripts/bench_serve.py --m3 build/release/m3 -m models/small [--clients 4]
"""
import argparse
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "server"))
import server_client  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--m3", default="build/release/m3")
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--parallel", default="1,2,4")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--requests", type=int, default=4, help="requests per client")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--prompt-words", type=int, default=150)
    ap.add_argument("-t", "--threads", type=int, default=0)
    ap.add_argument("--cache-mb", type=int, default=0,
                    help="prefix cache of the server (0: off, every prompt prefilled whole; the shared system "
                         "prompt is then reused when on)")
    args = ap.parse_args()

    words = "alpha beta gamma delta river stone cloud maple ember quartz harbor lantern".split()

    def body(i, j):
        text = " ".join(words[(i * 7 + j * 3 + k) % len(words)] for k in range(args.prompt_words))
        return {"model": os.path.basename(os.path.normpath(args.model)), "temperature": 0, "max_tokens": args.max_tokens, "ignore_eos": True,
                "messages": [{"role": "user", "content": f"Request {i}-{j}: {text}"}]}

    bodies = [[body(i, j) for j in range(args.requests)] for i in range(args.clients)]
    print(f"workload: {args.clients} streaming clients x {args.requests} requests, prompt ~{args.prompt_words} words, "
          f"{args.max_tokens} generated tokens each, greedy; prefix cache {args.cache_mb} MiB; model {args.model}")
    print()
    print("| --parallel | requests/s | TTFT mean ms | TTFT p90 ms | generated tok/s (all streams) | decode tok/s per stream | mean sequences per step |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for par in [int(p) for p in args.parallel.split(",")]:
            extra = ["--parallel", str(par), "--cache-mb", str(args.cache_mb)]
            if args.threads:
                extra += ["-t", str(args.threads)]
            proc, port = server_client.start_server(args.m3, args.model, extra, os.path.join(tmp, f"p{par}.log"))
            try:
                server_client.stream_chat("127.0.0.1", port, body(99, 0))  # warm-up
                before = server_client.get_metrics("127.0.0.1", port)
                results, errors, wall = server_client.run_clients("127.0.0.1", port, bodies)
                after = server_client.get_metrics("127.0.0.1", port)
            finally:
                proc.terminate()
                proc.wait()
            if errors:
                sys.exit(f"--parallel {par}: {len(errors)} errors: {errors[:3]}")
            flat = [r for row in results for r in row]
            ttft = sorted(r["ttft"] for r in flat)
            gen = sum(r["usage"]["completion_tokens"] for r in flat)
            per_stream = statistics.mean((r["usage"]["completion_tokens"] - 1) / (r["seconds"] - r["ttft"]) for r in flat)
            steps = after["m3_engine_steps_total"] - before["m3_engine_steps_total"]
            seqs = after["m3_engine_step_sequences_total"] - before["m3_engine_step_sequences_total"]
            print(f"| {par} | {len(flat) / wall:.2f} | {1000 * statistics.mean(ttft):.0f} | "
                  f"{1000 * ttft[min(len(ttft) - 1, int(0.9 * len(ttft)))]:.0f} | {gen / wall:.1f} | {per_stream:.1f} | "
                  f"{seqs / steps:.2f} |", flush=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""A multi-turn agent loop against `m3 serve`: KV reuse across turns is real and exact.
Both servers keep their caches in bf16 (--cache-type bf16), the spec's reference dtype.

Three turns of an agent session (system prompt, tools, the model's own replies and tool calls fed
back, tool results, a follow-up question) go to a warm server (prefix cache on, --parallel 2) and
the same conversations to a cold server (--cache-mb 0). For every turn after the first:
- usage.prompt_tokens_details.cached_tokens covers at least the whole previous prompt, and the
  server prefilled exactly prompt_tokens - cached_tokens tokens (m3_prefill_tokens_total);
- the log-probabilities (top 5 at every generated token, i.e. the logits' ranking and values) and
  the output equal the cold server's bit for bit.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.environ["M3_SOURCE_DIR"], "tests", "server"))
import server_client  # noqa: E402

M3 = os.environ["M3_BIN"]
SCRATCH = os.environ["M3_SCRATCH"]
os.makedirs(SCRATCH, exist_ok=True)
check = server_client.Checks("server-agent-loop")


def without_call_ids(message):
    """Tool-call ids are random per response; everything else must match."""
    m = dict(message)
    if m.get("tool_calls"):
        m["tool_calls"] = [{k: v for k, v in call.items() if k != "id"} for call in m["tool_calls"]]
    return m



model = os.path.join(SCRATCH, "tiny")
server_client.make_checkpoint(M3, "tiny", 9, model)
tools = [{"type": "function", "function": {
    "name": "read_file", "description": "Read a file of the project",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}]

warm_proc, warm = server_client.start_server(M3, model, ["-t", "2", "--parallel", "2", "--cache-type", "bf16"], os.path.join(SCRATCH, "warm.log"))
cold_proc, cold = server_client.start_server(M3, model, ["-t", "2", "--cache-mb", "0", "--cache-type", "bf16"], os.path.join(SCRATCH, "cold.log"))
try:
    messages = [{"role": "system", "content": "You are a coding agent. Use the tools."},
                {"role": "user", "content": "What does src/main.cpp do?"}]
    previous_prompt = 0
    for turn in range(3):
        body = {"model": "tiny", "messages": messages, "tools": tools, "temperature": 0, "max_tokens": 24,
                "logprobs": True, "top_logprobs": 5}
        # Turn 1 forces a tool call, as an agent's first step would make one.
        if turn == 0:
            body["tool_choice"] = {"type": "function", "function": {"name": "read_file"}}
        before = server_client.get_metrics("127.0.0.1", warm)
        st_w, w = server_client.post_chat(warm, body)
        after = server_client.get_metrics("127.0.0.1", warm)
        st_c, c = server_client.post_chat(cold, body)
        if st_w != 200 or st_c != 200:
            check(False, f"turn {turn + 1}: HTTP {st_w} / {st_c}: {w} {c}")
            break
        u = w["usage"]
        cached = u["prompt_tokens_details"]["cached_tokens"]
        prefilled = after["m3_prefill_tokens_total"] - before["m3_prefill_tokens_total"]
        check(prefilled == u["prompt_tokens"] - cached,
              f"turn {turn + 1}: prefilled {prefilled:.0f} = prompt {u['prompt_tokens']} - cached {cached}")
        if turn > 0:
            check(cached >= previous_prompt,
                  f"turn {turn + 1}: cached {cached} covers the previous prompt ({previous_prompt} tokens); "
                  f"new tokens prefilled: {u['prompt_tokens'] - cached}")
        check(c["usage"]["prompt_tokens_details"]["cached_tokens"] == 0 and c["usage"]["prompt_tokens"] == u["prompt_tokens"],
              f"turn {turn + 1}: cold server prefilled everything")
        check(w["choices"][0]["logprobs"] == c["choices"][0]["logprobs"] and len(w["choices"][0]["logprobs"]["content"]) > 0,
              f"turn {turn + 1}: log-probabilities (top 5 per token) equal the cold run's")
        check(without_call_ids(w["choices"][0]["message"]) == without_call_ids(c["choices"][0]["message"]),
              f"turn {turn + 1}: message (tool calls but their random ids) equals the cold run's")
        previous_prompt = u["prompt_tokens"]
        print(f"# turn {turn + 1}: finish_reason {w['choices'][0]['finish_reason']}, "
              f"{len(w['choices'][0]['message'].get('tool_calls') or [])} tool calls")

        # The agent appends the model's reply and answers its tool calls (or asks a follow-up).
        msg = w["choices"][0]["message"]
        reply = {"role": "assistant", "content": msg.get("content")}
        if msg.get("reasoning_content"):
            reply["reasoning_content"] = msg["reasoning_content"]
        if msg.get("tool_calls"):
            reply["tool_calls"] = msg["tool_calls"]
        messages.append(reply)
        for call in msg.get("tool_calls") or []:
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": "int main() { return 0; }"})
        if not msg.get("tool_calls"):
            messages.append({"role": "user", "content": f"Follow-up {turn + 1}: and then?"})
    check(warm_proc.poll() is None and cold_proc.poll() is None, "servers alive at the end")
finally:
    server_client.stop_servers([warm_proc, cold_proc])

check.finish()

"""`vllm serve` on the tpu device, through a real HTTP client on loopback."""

import json
import os
import socket
import subprocess
import sys
import time

import pytest

pytest.importorskip("vllm", reason="the serving environment (make serve-env) has vLLM")
httpx = pytest.importorskip("httpx")

from test_generate import hugging_face_greedy  # noqa: E402

NEW_TOKENS = 12


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    path = model_dir("llama")
    port = free_port()
    log = tmp_path_factory.mktemp("serve") / "server.log"
    command = [
        os.path.join(os.path.dirname(sys.executable), "vllm"),
        "serve",
        path,
        "--host", "127.0.0.1",
        "--port", str(port),
        "--dtype", "float32",
        "--max-model-len", "128",
        "--seed", "0",
    ]  # fmt: skip
    with open(log, "w") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 300
    while True:
        if proc.poll() is not None:
            pytest.fail(f"vllm serve exited with {proc.returncode}:\n{log.read_text()[-4000:]}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.time() > deadline:
            proc.kill()
            pytest.fail(f"vllm serve did not start in 300 s:\n{log.read_text()[-4000:]}")
        time.sleep(1)
    yield path, url
    proc.terminate()
    proc.wait(timeout=60)


def test_completions_equal_hugging_face(server):
    path, url = server
    prompt = "The quick brown fox"
    r = httpx.post(
        f"{url}/v1/completions",
        json={"model": path, "prompt": prompt, "max_tokens": NEW_TOKENS, "temperature": 0,
              "ignore_eos": True},
        timeout=120,
    )  # fmt: skip
    assert r.status_code == 200, r.text
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    expected = tokenizer.decode(hugging_face_greedy(path, [prompt], NEW_TOKENS)[0])
    assert r.json()["choices"][0]["text"] == expected


def streamed_text(url: str, endpoint: str, body: dict) -> str:
    text = ""
    with httpx.stream("POST", f"{url}{endpoint}", json={**body, "stream": True}, timeout=120) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            choice = json.loads(line[len("data: ") :])["choices"][0]
            text += choice.get("text") or (choice.get("delta") or {}).get("content") or ""
    return text


def test_chat_completions_streamed_as_whole(server):
    path, url = server
    body = {
        "model": path,
        "messages": [{"role": "user", "content": "One, two"}],
        "max_tokens": NEW_TOKENS,
        "temperature": 0,
        "ignore_eos": True,
    }
    r = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    whole = r.json()["choices"][0]["message"]["content"]
    assert whole and streamed_text(url, "/v1/chat/completions", body) == whole


def test_client_disconnecting_mid_stream(server):
    path, url = server
    body = {"model": path, "prompt": "vLLM serves", "max_tokens": 100, "temperature": 0,
            "ignore_eos": True, "stream": True}  # fmt: skip
    with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=120) as r:
        for line in r.iter_lines():
            if line.startswith("data: "):
                break  # leave after the first chunk
    # The server goes on serving.
    r = httpx.post(
        f"{url}/v1/completions",
        json={"model": path, "prompt": "One", "max_tokens": 4, "temperature": 0},
        timeout=120,
    )
    assert r.status_code == 200, r.text
    assert httpx.get(f"{url}/health", timeout=10).status_code == 200


def test_request_longer_than_max_model_len(server):
    path, url = server
    prompt = "The quick brown fox jumps over the lazy dog. " * 40
    r = httpx.post(
        f"{url}/v1/completions",
        json={"model": path, "prompt": prompt, "max_tokens": 4},
        timeout=120,
    )
    assert r.status_code == 400, r.text
    assert "maximum context length" in r.text or "max_model_len" in r.text, r.text
    assert httpx.get(f"{url}/health", timeout=10).status_code == 200

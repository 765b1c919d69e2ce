# An agent's integration test against policyguard -test-clock, in Python
# with the standard library only. It starts ./policyguard (or $POLICYGUARD)
# on a temporary database, checks until refused, advances the guard's clock
# by retry_after and is admitted again. README.md shows its heart; the test
# TestREADMEPythonSnippet runs it and checks what it prints.
import json, os, re, subprocess, tempfile, urllib.error, urllib.request

TOKEN = "test-admin-token"

def call(url, method, path, body=None, token=None):
    req = urllib.request.Request(url + path, method=method,
                                 data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    if token:
        req.add_header("Authorization", "Bearer " + token)
    try:
        with urllib.request.urlopen(req) as res:
            return res.status, json.load(res)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)

with tempfile.TemporaryDirectory() as tmp:
    guard = subprocess.Popen(
        [os.environ.get("POLICYGUARD", "./policyguard"), "-test-clock", "-addr", "127.0.0.1:0",
         "-db", os.path.join(tmp, "guardrail.db"), "-admin-token", TOKEN],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        url = next(m.group(1) for line in guard.stdout
                   if (m := re.search(r"listening on (http://\S+)", line)))
        assert call(url, "GET", "/healthz") == (200, {"status": "ok", "test_clock": True})
        call(url, "PUT", "/v1/tiers/trial", {"requests_per_minute": 3, "requests_per_hour": 100,
                                            "requests_per_day": 1000, "burst_allowance": 0}, TOKEN)
        check = {"context": {"user_id": "alice", "user_tier": "trial"}}
        admitted = 0
        while (answer := call(url, "POST", "/v1/check", check))[0] == 200:
            admitted += 1
        status, decision = answer
        print(f"{admitted} admitted, then {status}: {decision['reason']}, retry after {decision['retry_after']}s")
        call(url, "POST", "/v1/test/clock", {"advance": f"{decision['retry_after']}s"}, TOKEN)
        status, decision = call(url, "POST", "/v1/check", check)
        print(f"after advancing the clock: {status}, allowed {decision['allowed']}")
        assert status == 200
    finally:
        guard.terminate()
        guard.wait()

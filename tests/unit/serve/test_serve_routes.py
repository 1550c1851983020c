"""``hqa serve``'s app as the split builds it (hqa.serve.api, guards, routes): the route table and operation ids the
OpenAPI document published, and a question limit that belongs to each app (two apps in one process, two limits)."""

from __future__ import annotations

from fastapi.testclient import TestClient

from hqa.serve import ServeOptions, create_app


def test_the_route_table_and_operation_ids_are_the_published_ones():
    with TestClient(create_app(None)) as client:
        doc = client.get("/openapi.json").json()
        page = client.get("/")
    ops = {(path, method): op["operationId"] for path, item in doc["paths"].items() for method, op in item.items()}
    assert ops == {("/healthz", "get"): "healthz_healthz_get",
                   ("/v1/programs", "get"): "list_programs_v1_programs_get",
                   ("/v1/ask", "post"): "ask_v1_ask_post",
                   ("/v1/ask/stream", "post"): "ask_stream_v1_ask_stream_post"}
    assert doc["paths"]["/v1/ask"]["post"]["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/AskRequest"}
    assert set(doc["paths"]["/v1/ask"]["post"]["responses"]) == {"200", "401", "413", "422", "503", "504"}
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")


def test_each_app_keeps_its_own_question_limit():
    short = TestClient(create_app(None, options=ServeOptions(max_question_chars=20)))
    default = TestClient(create_app(None))
    question = "Who wrote the novel that Animal Farm's author wrote next?"  # 57 characters
    with short, default:
        refused = short.post("/v1/ask", json={"question": question, "unknown": 1})
        admitted = default.post("/v1/ask", json={"question": question})
    # the limit is checked while the body is validated (before the unknown key, before admission)
    assert refused.status_code == 422
    assert refused.json() == {"error": f"question: question is {len(question)} characters long; the limit is 20"}
    assert admitted.status_code == 503 and "still loading" in admitted.json()["error"]  # valid: refused only as not ready

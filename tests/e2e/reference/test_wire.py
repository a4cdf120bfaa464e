"""Unit tests of `wire.py`'s JSON text handling and `normalize` (no server, no Vigil: fast)."""

from __future__ import annotations

import httpx
import pytest

from reference.wire import (
    MODERN,
    VIGIL_META_KEYS,
    JsonTextError,
    Obj,
    Scalar,
    _sse_events,
    compact,
    dump,
    first_difference,
    header_value,
    member_text,
    modern_headers,
    modern_params,
    normalize,
    parse,
)

# === parse / dump keep the text ===


@pytest.mark.parametrize(
    "text",
    [
        '{"b":1,"a":2}',
        '{"temperature":0.7}',
        '{"temperature":0.699999988079071}',
        '{"minimum":0,"maximum":1000.0,"n":-0,"e":1e2,"E":1E+2,"f":2.50}',
        '{"s":"caf\\u00e9","t":"café","q":"a\\"b\\\\","u":"\\ud83d\\ude00","slash":"\\/"}',
        '[true,false,null,[],{},[{}],""]',
        '{"nested":{"z":{"y":[1,{"x":"\\\\"}]}}}',
        '"just a string"',
        "12345678901234567890123",
    ],
)
def test_dump_of_parse_is_the_compact_text(text: str) -> None:
    assert dump(parse(text)) == text


def test_whitespace_between_tokens_is_dropped_and_nothing_else() -> None:
    assert compact(' { "a" : [ 1 , 2.0 ] ,\n\t"b" : " x y " } ') == '{"a":[1,2.0],"b":" x y "}'


def test_key_order_and_number_text_are_kept() -> None:
    assert dump(parse('{"b":1.0,"a":1}')) != dump(parse('{"a":1,"b":1.0}'))
    assert dump(parse('{"t":0.7}')) != dump(parse('{"t":0.699999988079071}'))
    assert dump(parse('{"m":0}')) != dump(parse('{"m":0.0}'))


def test_escapes_are_kept_as_written() -> None:
    assert dump(parse('"\\u00e9"')) != dump(parse('"é"'))


@pytest.mark.parametrize(
    "bad",
    ['{"a":1', '{"a":1}x', '{"a" 1}', "[1,]", '"open', "{'a':1}", "nul", "01x", ""],
)
def test_bad_json_is_refused(bad: str) -> None:
    with pytest.raises((JsonTextError, ValueError)):
        parse(bad)


def test_long_strings_parse_quickly_and_exactly() -> None:
    body = ('x\\"y\\\\' * 400_000) + "é"
    text = '{"text":"' + body + '"}'
    assert dump(parse(text)) == text


def test_member_text_is_the_exact_substring() -> None:
    text = '{"result":{"tools":[{"name":"a","inputSchema":{"type":"object","minimum":0}}]},"jsonrpc":"2.0","id":3}'
    assert member_text(text, "result", "tools", 0, "inputSchema") == '{"type":"object","minimum":0}'


def test_obj_accessors() -> None:
    obj = parse('{"a":1,"b":{"c":"d"}}')
    assert isinstance(obj, Obj)
    assert obj.keys_() == ["a", "b"]
    assert obj.get("a") == Scalar("1") and obj.get("missing") is None
    obj.put("a", Scalar("2"))
    obj.drop("b")
    assert dump(obj) == '{"a":2}'


# === normalize takes out exactly the documented differences ===


def test_ids_are_taken_out() -> None:
    assert normalize('{"jsonrpc":"2.0","id":7,"result":{}}') == normalize('{"jsonrpc":"2.0","id":"vr-9","result":{}}')
    assert normalize('{"jsonrpc":"2.0","id":0,"method":"ping"}') == '{"jsonrpc":"2.0","id":"<id>","method":"ping"}'


def test_envelope_order_is_taken_out_but_not_result_order() -> None:
    ts = '{"result":{"a":1,"b":2},"jsonrpc":"2.0","id":1}'
    rust = '{"jsonrpc":"2.0","id":1,"result":{"a":1,"b":2}}'
    assert normalize(ts) == normalize(rust)
    assert normalize(ts) != normalize('{"jsonrpc":"2.0","id":1,"result":{"b":2,"a":1}}')
    ts_request = '{"method":"sampling/createMessage","params":{"x":1},"jsonrpc":"2.0","id":0}'
    assert normalize(ts_request) == '{"jsonrpc":"2.0","id":"<id>","method":"sampling/createMessage","params":{"x":1}}'


def test_prefix_is_taken_out_of_listed_names_only() -> None:
    direct = '{"jsonrpc":"2.0","id":2,"result":{"tools":[{"name":"echo","title":"everything__x"}]}}'
    via = '{"jsonrpc":"2.0","id":2,"result":{"tools":[{"name":"everything__echo","title":"everything__x"}]}}'
    assert normalize(direct, answers="tools/list") == normalize(via, answers="tools/list", prefix="everything__")
    # Without the prefix, or in another method's result, a name is left as it is.
    assert normalize(via, answers="tools/list") != normalize(direct, answers="tools/list")
    assert normalize(via, answers="tools/call", prefix="everything__") != normalize(direct, answers="tools/call")
    prompts = '{"jsonrpc":"2.0","id":2,"result":{"prompts":[{"name":"everything__simple-prompt"}]}}'
    assert normalize(prompts, answers="prompts/list", prefix="everything__") == (
        '{"jsonrpc":"2.0","id":"<id>","result":{"prompts":[{"name":"simple-prompt"}]}}'
    )


def test_a_name_lacking_the_prefix_stays_different() -> None:
    via = '{"jsonrpc":"2.0","id":2,"result":{"tools":[{"name":"other__echo"}]}}'
    assert '"other__echo"' in normalize(via, answers="tools/list", prefix="everything__")


def test_progress_tokens_are_taken_out() -> None:
    a = '{"method":"notifications/progress","params":{"progress":1,"total":2,"progressToken":"p-1"},"jsonrpc":"2.0"}'
    b = '{"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1,"total":2,"progressToken":0}}'
    assert normalize(a) == normalize(b)
    req_a = '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","_meta":{"progressToken":"a"}}}'
    req_b = '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"x","_meta":{"progressToken":42}}}'
    assert normalize(req_a) == normalize(req_b)


def test_a_requests_progress_token_is_the_documented_difference_present_or_not() -> None:
    direct = '{"jsonrpc":"2.0","id":0,"method":"sampling/createMessage","params":{"maxTokens":50}}'
    via = (
        '{"jsonrpc":"2.0","id":0,"method":"sampling/createMessage",'
        '"params":{"_meta":{"progressToken":0},"maxTokens":50}}'
    )
    assert normalize(direct) == normalize(via)
    # Other `_meta` entries beside it still count.
    other = (
        '{"jsonrpc":"2.0","id":0,"method":"sampling/createMessage",'
        '"params":{"_meta":{"progressToken":0,"x":1},"maxTokens":50}}'
    )
    assert normalize(direct) != normalize(other)


def test_progress_numbers_are_not_normalized() -> None:
    a = '{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"p","progress":1,"total":2}}'
    b = '{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"p","progress":1.0,"total":2.0}}'
    assert normalize(a) != normalize(b)


def test_vigils_meta_keys_are_taken_out_and_the_callers_kept() -> None:
    keys = ",".join(f'"{k}":{{}}' for k in VIGIL_META_KEYS)
    via = f'{{"jsonrpc":"2.0","id":1,"result":{{"content":[],"_meta":{{{keys},"trace":"x"}}}}}}'
    direct = '{"jsonrpc":"2.0","id":1,"result":{"content":[],"_meta":{"trace":"x"}}}'
    assert normalize(via, answers="tools/call") == normalize(direct, answers="tools/call")


def test_a_meta_emptied_by_the_removal_goes_but_an_empty_meta_of_the_server_stays() -> None:
    via = '{"jsonrpc":"2.0","id":1,"result":{"content":[],"_meta":{"io.modelcontextprotocol/protocolVersion":"x"}}}'
    assert normalize(via, answers="tools/call") == '{"jsonrpc":"2.0","id":"<id>","result":{"content":[]}}'
    own = '{"jsonrpc":"2.0","id":1,"result":{"content":[],"_meta":{}}}'
    assert normalize(own, answers="tools/call") == '{"jsonrpc":"2.0","id":"<id>","result":{"content":[],"_meta":{}}}'


def test_other_meta_keys_are_not_taken_out() -> None:
    a = '{"jsonrpc":"2.0","id":1,"result":{"_meta":{"io.modelcontextprotocol/related-task":{"taskId":"t"}}}}'
    assert "related-task" in normalize(a, answers="tools/call")


@pytest.mark.parametrize("method", ["initialize", "server/discover"])
def test_the_gateways_own_results_are_not_compared(method: str) -> None:
    server = '{"result":{"protocolVersion":"2025-11-25","serverInfo":{"name":"everything"}},"jsonrpc":"2.0","id":1}'
    vigil = '{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25","serverInfo":{"name":"vigil"}}}'
    assert normalize(server, answers=method) == normalize(vigil, answers=method)
    assert normalize(server, answers="tools/call") != normalize(vigil, answers="tools/call")


def test_errors_are_compared() -> None:
    a = '{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"Method not found"}}'
    b = '{"jsonrpc":"2.0","id":1,"error":{"message":"Method not found","code":-32601}}'
    assert normalize(a) != normalize(b)


def test_everything_else_stays() -> None:
    text = '{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"x"}],"structuredContent":{"t":0.7}}}'
    assert normalize(text, answers="tools/call") == text.replace('"id":1', '"id":"<id>"')


def test_first_difference() -> None:
    assert first_difference("abc", "abc") is None
    diff = first_difference('{"temperature":0.7}', '{"temperature":0.699999988079071}')
    assert diff is not None and "character 17" in diff and "0.699999988079071" in diff


# === 2026-07-28: what the era adds, and only that ===

HANDSHAKE_LIST = '{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"echo"}]}}'
MODERN_LIST = (
    '{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"everything__echo"}],'
    '"ttlMs":0,"cacheScope":"public","resultType":"complete"}}'
)


def test_the_eras_members_are_taken_out_of_a_modern_answer() -> None:
    expected = normalize(HANDSHAKE_LIST, answers="tools/list")
    assert normalize(MODERN_LIST, answers="tools/list", prefix="everything__", revision=MODERN) == expected
    read = '{"jsonrpc":"2.0","id":1,"result":{"contents":[],"resultType":"complete","cacheScope":"private"}}'
    assert normalize(read, answers="resources/read", revision=MODERN) == (
        '{"jsonrpc":"2.0","id":"<id>","result":{"contents":[]}}'
    )
    call = '{"jsonrpc":"2.0","id":1,"result":{"content":[],"structuredContent":{"t":0.7},"resultType":"complete"}}'
    assert normalize(call, answers="tools/call", revision=MODERN) == (
        '{"jsonrpc":"2.0","id":"<id>","result":{"content":[],"structuredContent":{"t":0.7}}}'
    )


def test_the_eras_members_stay_without_the_modern_revision() -> None:
    assert '"resultType":"complete"' in normalize(MODERN_LIST, answers="tools/list")
    assert '"ttlMs":0' in normalize(MODERN_LIST, answers="tools/list", revision="2025-11-25")


def test_only_a_complete_result_type_is_the_documented_difference() -> None:
    other = '{"jsonrpc":"2.0","id":1,"result":{"inputRequests":{},"resultType":"input_required"}}'
    assert '"resultType":"input_required"' in normalize(other, answers="tools/call", revision=MODERN)


def test_caching_hints_are_taken_out_of_lists_and_reads_only() -> None:
    call = '{"jsonrpc":"2.0","id":1,"result":{"content":[],"ttlMs":0,"cacheScope":"public"}}'
    assert '"ttlMs":0,"cacheScope":"public"' in normalize(call, answers="tools/call", revision=MODERN)
    odd = '{"jsonrpc":"2.0","id":1,"result":{"tools":[],"ttlMs":"0","cacheScope":"shared"}}'
    assert '"ttlMs":"0","cacheScope":"shared"' in normalize(odd, answers="tools/list", revision=MODERN)


def test_the_eras_members_inside_a_result_stay() -> None:
    nested = '{"jsonrpc":"2.0","id":1,"result":{"structuredContent":{"resultType":"complete","ttlMs":0}}}'
    assert '{"resultType":"complete","ttlMs":0}' in normalize(nested, answers="resources/read", revision=MODERN)


def test_modern_params_put_the_envelope_in_meta_and_keep_the_rest() -> None:
    envelope = (
        f'"io.modelcontextprotocol/protocolVersion":"{MODERN}",'
        '"io.modelcontextprotocol/clientInfo":{"name":"vigil-differential","version":"1.0.0"},'
        '"io.modelcontextprotocol/clientCapabilities":{"roots":{"listChanged":true}}'
    )
    caps = '{"roots":{"listChanged":true}}'
    assert modern_params(None, caps) == '{"_meta":{' + envelope + "}}"
    assert modern_params('{"name":"x","arguments":{"t":0.70}}', caps) == (
        '{"name":"x","arguments":{"t":0.70},"_meta":{' + envelope + "}}"
    )
    assert modern_params('{"_meta":{"progressToken":"p"},"uri":"u"}', caps) == (
        '{"_meta":{"progressToken":"p",' + envelope + '},"uri":"u"}'
    )
    with pytest.raises(JsonTextError):
        modern_params("[]")


def test_modern_headers_name_the_method_and_what_it_acts_on() -> None:
    assert modern_headers("tools/list", modern_params(None)) == {"Mcp-Method": "tools/list"}
    assert modern_headers("tools/call", '{"name":"everything__get-sum"}') == {
        "Mcp-Method": "tools/call",
        "Mcp-Name": "everything__get-sum",
    }
    assert modern_headers("resources/read", '{"uri":"demo://x/1"}')["Mcp-Name"] == "demo://x/1"
    assert modern_headers("prompts/get", '{"name":"é"}')["Mcp-Name"] == "=?base64?w6k=?="


@pytest.mark.parametrize(
    ("value", "sent"),
    [
        ("plain-name", "plain-name"),
        ("", ""),
        ("a b", "a b"),
        (" lead", "=?base64?IGxlYWQ=?="),
        ("tab\t", "=?base64?dGFiCQ==?="),
        ("=?base64?eA==?=", "=?base64?PT9iYXNlNjQ/ZUE9PT89?="),
    ],
)
def test_header_values_are_base64_only_when_they_cannot_travel_as_is(value: str, sent: str) -> None:
    assert header_value(value) == sent


# === server-sent events ===


def sse(body: bytes, sink: bytearray | None = None) -> list[str]:
    resp = httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})
    return list(_sse_events(resp, sink))


def test_sse_events_as_the_spec_dispatches_them() -> None:
    body = (
        b": comment\n"
        b"id: 1\nretry: 3000\ndata: \n\n"  # a priming event: empty data, not a message
        b'event: message\ndata: {"a":1}\n\n'
        b"data: line one\r\ndata:line two\r\n\r\n"
        b'data: {"cut":true}\n'  # the stream ends before the event's blank line
    )
    raw = bytearray()
    assert sse(body, raw) == ['{"a":1}', "line one\nline two"]
    assert bytes(raw) == body


def test_sse_event_of_several_megabytes() -> None:
    big = '{"text":"' + "x" * 3_000_000 + '"}'
    assert sse(b"data: " + big.encode() + b"\n\n") == [big]


def test_server_info_stamps_are_taken_out_where_documented_only() -> None:
    stamp = '"_meta":{"io.modelcontextprotocol/serverInfo":{"name":"NAME","version":"1"}}'
    vigil = stamp.replace("NAME", "vigil")
    server = stamp.replace("NAME", "mcp-time")
    bare_list = normalize('{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}', answers="tools/list")
    # A list is the gateway's: whoever's stamp it carries.
    for text in (vigil, server):
        listed = '{"jsonrpc":"2.0","id":1,"result":{"tools":[],' + text + "}}"
        assert normalize(listed, answers="tools/list", revision=MODERN) == bare_list
    # Any other result: the gateway's stamp goes, the server's stays.
    call = '{"jsonrpc":"2.0","id":1,"result":{"content":[],' + vigil + "}}"
    bare_call = normalize('{"jsonrpc":"2.0","id":1,"result":{"content":[]}}', answers="tools/call")
    assert normalize(call, answers="tools/call", revision=MODERN) == bare_call
    kept = '{"jsonrpc":"2.0","id":1,"result":{"content":[],' + server + "}}"
    assert normalize(kept, answers="tools/call", revision=MODERN) != bare_call
    # Only for a 2026-07-28 client.
    assert normalize(call, answers="tools/call") != bare_call

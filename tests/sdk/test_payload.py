"""Typed payloads, decoded before the handler: dataclasses, msgspec Structs, pydantic models, typed builtins."""

from __future__ import annotations

import dataclasses

import msgspec
import pydantic
import pytest

from pulse_trio.sdk import InvalidPayload, Registry, TaskContext
from pulse_trio.sdk.payload import decoder_for


@dataclasses.dataclass
class Invoice:
    invoice: int
    amount: str = "0.00"


class InvoiceStruct(msgspec.Struct, forbid_unknown_fields=True):
    invoice: int
    lines: list[str] = []


class InvoiceModel(pydantic.BaseModel):
    invoice: int
    email: str


@pytest.mark.parametrize("kind, good, value", [
    (Invoice, '{"invoice": 7, "amount": "1.50"}', Invoice(7, "1.50")),
    (InvoiceStruct, '{"invoice": 7, "lines": ["a"]}', InvoiceStruct(7, ["a"])),
    (InvoiceModel, '{"invoice": 7, "email": "a@b"}', InvoiceModel(invoice=7, email="a@b")),
    (dict[str, int], '{"a": 1}', {"a": 1}),
])
def test_a_fitting_payload_is_decoded_into_the_type(kind, good, value):
    assert decoder_for(kind)(good) == value


@pytest.mark.parametrize("kind, bad, words", [
    (Invoice, '{"invoice": "seven"}', ["Invoice", "Expected `int`, got `str`", "$.invoice"]),
    (Invoice, '{"amount": "1.50"}', ["Invoice", "missing required field `invoice`"]),
    (InvoiceStruct, '{"invoice": 1, "extra": 2}', ["InvoiceStruct", "unknown field `extra`"]),
    (InvoiceStruct, '{"invoice": 1, "lines": [1]}', ["InvoiceStruct", "$.lines[0]"]),
    (InvoiceModel, '{"invoice": 1}', ["InvoiceModel", "Field required", "$.email"]),
    (InvoiceModel, '{"invoice": "x", "email": "a"}', ["InvoiceModel", "$.invoice"]),
    (dict[str, int], '[1]', ["Expected `object`, got `array`"]),
])
def test_a_payload_that_does_not_fit_names_the_field(kind, bad, words):
    with pytest.raises(InvalidPayload) as refused:
        decoder_for(kind)(bad)
    message = str(refused.value)
    assert message.startswith("the payload does not fit"), message
    for word in words:
        assert word in message, message


def test_the_handler_signature_decides_what_it_is_given():
    registry = Registry()

    @registry.handler("billing", "plain")
    async def plain(task: TaskContext) -> None: ...

    @registry.handler("billing", "untyped")
    async def untyped(task: TaskContext, payload) -> None: ...

    @registry.handler("billing", "typed")
    def typed(task: TaskContext, invoice: Invoice) -> None: ...

    assert not registry.get("billing", "plain").takes_payload
    assert registry.get("billing", "untyped").takes_payload
    assert registry.get("billing", "untyped").decode("[1, 2]") == [1, 2]  # Any: the plain JSON value
    handler = registry.get("billing", "typed")
    assert handler.takes_payload and handler.sync and handler.decode('{"invoice": 3}') == Invoice(3)

    def three(task, payload, other): ...

    with pytest.raises(TypeError, match="takes \\(task\\) or \\(task, payload\\)"):
        registry.add("billing", "three", three)

    class NotSupported:
        pass

    def odd(task, payload: NotSupported): ...

    with pytest.raises(TypeError):
        registry.add("billing", "odd", odd)

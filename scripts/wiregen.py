#!/usr/bin/env python3
"""Generates the topic records' Swift from their declaration, each field declared once.

    python3 scripts/wiregen.py           write Shared/PushModels/Generated/Records+Wire.swift
    python3 scripts/wiregen.py --check   exit 1 if the committed file is not what this writes, or
                                         Tests/PushModelsTests/Fixtures/rules/current.json is not
                                         what --rules prints
    python3 scripts/wiregen.py --rules   print the records' reading and writing rules as JSON

Reads Shared/PushModels/Records.wire (its header describes the format) and writes, for
each record, the struct with its stored properties, `init(fields:)` reading the fields
in declaration order, and `write(to:)` writing them with the keys in ascending byte
order: straight-line code, one `WireFields` read and one `JSONObjectWriter.field` call
per field, as a hand-written record would have. Python 3 standard library only.
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DECLARATION = Path("Shared/PushModels/Records.wire")
OUTPUT = Path("Shared/PushModels/Generated/Records+Wire.swift")
# The rules of the tree (`--rules`), committed beside each release's frozen copy
# (`rules/X.Y.Z.json`); WireCompatibilityTests compares the two (docs/compatibility.md).
RULES = Path("Tests/PushModelsTests/Fixtures/rules/current.json")
# The Swift beside the declaration: the `named` codecs' enums, and DeliveryClass's reader.
SWIFT_SOURCES = Path("Shared/PushModels")
LINE_LENGTH = 120


class DeclarationError(Exception):
    def __init__(self, line: int, message: str):
        super().__init__(f"{DECLARATION}:{line}: {message}")


# MARK: - The declaration


@dataclass
class Wrapper:
    name: str
    label: str | None  # the label of TYPE(LABEL: BASE) (`rawValue`, `name`), None for TYPE(BASE)
    base: str  # string, int or int64
    accessor: str  # the property that gives the base value back

    def make(self, value: str) -> str:
        return f"{self.name}({self.label}: {value})" if self.label else f"{self.name}({value})"


@dataclass
class Field:
    line: int
    name: str
    type: str
    key: str
    codec: str
    docs: list[str]
    default: str | None = None
    required_without: str | None = None
    only_without: str | None = None
    fallback: tuple[str, str] | None = None  # (key, codec)

    @property
    def optional(self) -> bool:
        return self.type.endswith("?")

    @property
    def unless(self) -> str | None:
        """The optional field whose presence keeps this one off the wire."""
        return self.required_without or self.only_without


@dataclass
class Case:
    line: int
    name: str
    tag: str
    docs: list[str]
    fields: list[Field] = field(default_factory=list)


@dataclass
class Union:
    line: int
    name: str
    type: str
    key: str
    tag_type: str
    docs: list[str]
    cases: list[Case] = field(default_factory=list)


@dataclass
class Record:
    line: int
    name: str
    docs: list[str]
    members: list[Field | Union] = field(default_factory=list)
    init_docs: list[str] = field(default_factory=list)
    write_docs: list[str] = field(default_factory=list)


IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]*"
KEY = r"[A-Za-z0-9_.\-]+"  # written into a StaticString literal as is
FIELD_LINE = re.compile(rf"^({IDENTIFIER}):\s+(\S+)\s+({KEY})\s+(\S+)((?:\s+\S+)*)$")
UNION_LINE = re.compile(rf"^union\s+({IDENTIFIER}):\s+(\S+)\s+({KEY})\s+({IDENTIFIER})$")
CASE_LINE = re.compile(rf"^case\s+({IDENTIFIER})\s+({KEY})$")
RECORD_LINE = re.compile(rf"^record\s+({IDENTIFIER})$")
WRAPPER_LINE = re.compile(rf"^wrapper\s+({IDENTIFIER})\((?:({IDENTIFIER}):\s*)?(string|int|int64)\)\s+\.({IDENTIFIER})$")

SIMPLE_CODECS = {"string", "int", "int64", "int64s", "named", "object"}
REQUIRED_ONLY_CODECS = {"json", "objects"}


def parse(text: str) -> tuple[dict[str, Wrapper], list[Record]]:
    wrappers: dict[str, Wrapper] = {}
    records: list[Record] = []
    docs: list[str] = []
    docs_line = 0
    record: Record | None = None
    union: Union | None = None
    case: Case | None = None

    def take_docs() -> list[str]:
        nonlocal docs
        taken, docs = docs, []
        return taken

    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or (line.startswith("#")):
            if docs and not line:
                raise DeclarationError(docs_line, "a doc comment must stand right above what it documents")
            continue
        if line.startswith("///"):
            if not docs:
                docs_line = number
            docs.append(line)
            continue
        if line == "end":
            if docs:
                raise DeclarationError(docs_line, "a doc comment documents nothing")
            if union is not None:
                if not union.cases:
                    raise DeclarationError(union.line, f"union `{union.name}` has no case")
                union, case = None, None
            elif record is not None:
                if not record.members:
                    raise DeclarationError(record.line, f"record `{record.name}` has no field")
                records.append(record)
                record = None
            else:
                raise DeclarationError(number, "`end` outside a record")
            continue
        if m := WRAPPER_LINE.match(line):
            if record is not None:
                raise DeclarationError(number, "wrappers are declared outside records")
            name, label, base, accessor = m.groups()
            if name in wrappers:
                raise DeclarationError(number, f"wrapper `{name}` declared twice")
            take_docs()
            wrappers[name] = Wrapper(name, label, base, accessor)
            continue
        if m := RECORD_LINE.match(line):
            if record is not None:
                raise DeclarationError(number, f"record `{record.name}` is not closed with `end`")
            record = Record(number, m.group(1), take_docs())
            continue
        if record is None:
            raise DeclarationError(number, f"cannot read this outside a record: {line}")
        if line == "init(fields:)" or line == "write(to:)":
            if union is not None:
                raise DeclarationError(number, f"`{line}` inside a union")
            if not docs:
                raise DeclarationError(number, f"`{line}` is only there to carry a doc comment")
            if line == "init(fields:)":
                record.init_docs = take_docs()
            else:
                record.write_docs = take_docs()
            continue
        if m := UNION_LINE.match(line):
            if union is not None:
                raise DeclarationError(number, "a union inside a union")
            name, type_, key, tag_type = m.groups()
            union = Union(number, name, type_, key, tag_type, take_docs())
            record.members.append(union)
            continue
        if m := CASE_LINE.match(line):
            if union is None:
                raise DeclarationError(number, "`case` outside a union")
            case = Case(number, m.group(1), m.group(2), take_docs())
            union.cases.append(case)
            continue
        if m := FIELD_LINE.match(line):
            name, type_, key, codec, rest = m.groups()
            item = Field(number, name, type_, key, codec, take_docs())
            for option in rest.split():
                option_name, _, value = option.partition("=")
                if not value:
                    raise DeclarationError(number, f"option `{option}` needs a value (`{option_name}=…`)")
                if option_name == "default":
                    item.default = value
                elif option_name == "required-without":
                    item.required_without = value
                elif option_name == "only-without":
                    item.only_without = value
                elif option_name == "or":
                    fallback_key, _, fallback_codec = value.partition(":")
                    if not re.fullmatch(KEY, fallback_key) or not fallback_codec:
                        raise DeclarationError(number, f"`or=` takes KEY:CODEC, not `{value}`")
                    item.fallback = (fallback_key, fallback_codec)
                else:
                    raise DeclarationError(
                        number, f"unknown option `{option_name}` (default, required-without, only-without, or)"
                    )
            if union is not None:
                if case is None:
                    raise DeclarationError(number, "a union's fields follow a `case` line")
                case.fields.append(item)
            else:
                record.members.append(item)
            continue
        raise DeclarationError(number, f"cannot read this line: {line}")
    if record is not None:
        raise DeclarationError(record.line, f"record `{record.name}` is not closed with `end`")
    if docs:
        raise DeclarationError(docs_line, "a doc comment documents nothing")
    return wrappers, records


# MARK: - Codecs: how one value is read and written


class Codecs:
    def __init__(self, wrappers: dict[str, Wrapper]):
        self.wrappers = wrappers

    def _list_wrapper(self, codec: str) -> Wrapper | None:
        m = re.fullmatch(rf"\[({IDENTIFIER})\]", codec)
        return self.wrappers.get(m.group(1)) if m else None

    def check(self, item: Field, codec: str, *, fallback: bool = False) -> None:
        known = SIMPLE_CODECS | REQUIRED_ONLY_CODECS | {"utf8"} | set(self.wrappers)
        if codec == "canonical" and fallback:
            return
        if codec in known:
            return
        wrapper = self._list_wrapper(codec)
        if wrapper is not None:
            if wrapper.base != "int64":
                raise DeclarationError(item.line, f"`{codec}`: only lists of int64 wrappers can be read (int64s)")
            return
        listed = ", ".join(sorted(known) + ["[W]"] + (["canonical"] if fallback else []))
        raise DeclarationError(item.line, f"unknown codec `{codec}` (one of: {listed})")

    def can_read_if_present(self, codec: str) -> bool:
        return codec not in REQUIRED_ONLY_CODECS and codec != "canonical"

    def required(self, codec: str, key: str) -> str:
        """An expression reading a required `key` (absent throws)."""
        if codec in SIMPLE_CODECS:
            return f'try fields.{codec}("{key}")'
        if codec == "json":
            return f'try fields.value("{key}")'
        if codec == "objects":
            return f'try fields.objects("{key}")'
        if codec == "utf8":
            return f'Array(try fields.string("{key}").utf8)'
        if codec == "canonical":
            return f'Wire.canonical(try fields.value("{key}"))'
        if codec in self.wrappers:
            wrapper = self.wrappers[codec]
            return wrapper.make(f'try fields.{wrapper.base}("{key}")')
        wrapper = self._list_wrapper(codec)
        assert wrapper is not None
        return f'try fields.int64s("{key}").map {{ {wrapper.make("$0")} }}'

    def if_present(self, codec: str, key: str) -> str:
        """An expression reading `key` as an optional (absent or null: nil)."""
        if codec in SIMPLE_CODECS:
            return f'try fields.{codec}(ifPresent: "{key}")'
        if codec == "utf8":
            return f'try fields.string(ifPresent: "{key}").map {{ Array($0.utf8) }}'
        if codec in self.wrappers:
            wrapper = self.wrappers[codec]
            return f'try fields.{wrapper.base}(ifPresent: "{key}").map {{ {wrapper.make("$0")} }}'
        wrapper = self._list_wrapper(codec)
        assert wrapper is not None, codec
        return f'try fields.int64s(ifPresent: "{key}")?.map {{ {wrapper.make("$0")} }}'

    def if_present_bound(self, codec: str, key: str) -> tuple[str, str]:
        """(an optional expression to bind as `value`, the field's value made from `value`)."""
        if codec in SIMPLE_CODECS:
            return f'try fields.{codec}(ifPresent: "{key}")', "value"
        if codec == "utf8":
            return f'try fields.string(ifPresent: "{key}")', "Array(value.utf8)"
        if codec in self.wrappers:
            wrapper = self.wrappers[codec]
            return f'try fields.{wrapper.base}(ifPresent: "{key}")', wrapper.make("value")
        wrapper = self._list_wrapper(codec)
        assert wrapper is not None, codec
        return f'try fields.int64s(ifPresent: "{key}")', f"value.map {{ {wrapper.make('$0')} }}"

    def write(self, codec: str, key: str, value: str, optional: bool) -> str:
        """The statement writing `value` under `key` (an optional's nil is left out)."""
        unwrap = "?" if optional else ""
        if codec == "utf8":
            return f'object.field("{key}", utf8: {value})'
        if codec in self.wrappers:
            return f'object.field("{key}", {value}{unwrap}.{self.wrappers[codec].accessor})'
        wrapper = self._list_wrapper(codec)
        if wrapper is not None:
            return f'object.field("{key}", {value}{unwrap}.map {{ $0.{wrapper.accessor} }})'
        return f'object.field("{key}", {value})'


def validate(wrappers: dict[str, Wrapper], records: list[Record]) -> None:
    codecs = Codecs(wrappers)
    names: set[str] = set()
    for record in records:
        if record.name in names:
            raise DeclarationError(record.line, f"record `{record.name}` declared twice")
        names.add(record.name)
        properties: dict[str, Field | Union] = {}
        keys: dict[str, int] = {}

        def claim_key(key: str, line: int, scope: dict[str, int]) -> None:
            if key in scope:
                raise DeclarationError(line, f"key `{key}` already used on line {scope[key]} of this record")
            scope[key] = line

        unions = [m for m in record.members if isinstance(m, Union)]
        if len(unions) > 1:
            raise DeclarationError(unions[1].line, "one union per record")
        for member in record.members:
            if member.name in properties:
                raise DeclarationError(member.line, f"`{member.name}` declared twice in `{record.name}`")
            if isinstance(member, Union):
                claim_key(member.key, member.line, keys)
                properties[member.name] = member
                continue
            check_field(codecs, member, properties, in_case=False)
            claim_key(member.key, member.line, keys)
            if member.fallback:
                claim_key(member.fallback[0], member.line, keys)
            properties[member.name] = member
        for union in unions:
            tags: dict[str, int] = {}
            case_names: dict[str, int] = {}
            for case in union.cases:
                claim_key(case.tag, case.line, tags)
                if case.name in case_names:
                    raise DeclarationError(case.line, f"case `{case.name}` declared twice")
                case_names[case.name] = case.line
                case_keys = dict(keys)
                labels: set[str] = set()
                for item in case.fields:
                    if item.name in properties or item.name in labels:
                        # Bound by name in `write(to:)`: it would hide the record's property.
                        raise DeclarationError(item.line, f"`{item.name}` is already a name in `{record.name}`")
                    labels.add(item.name)
                    check_field(codecs, item, properties, in_case=True)
                    claim_key(item.key, item.line, case_keys)


def check_field(codecs: Codecs, item: Field, earlier: dict[str, Field | Union], in_case: bool) -> None:
    codecs.check(item, item.codec)
    if item.optional and item.default is not None:
        raise DeclarationError(item.line, "an optional field reads as nil when absent: no `default=`")
    if item.optional and not codecs.can_read_if_present(item.codec):
        raise DeclarationError(item.line, f"a `{item.codec}` field cannot be optional")
    if item.optional and item.codec == "utf8":
        raise DeclarationError(item.line, "an optional `utf8` field cannot be written")
    needs_present = item.optional or item.default is not None
    if needs_present and not codecs.can_read_if_present(item.codec):
        raise DeclarationError(item.line, f"a `{item.codec}` field is required: no `default=`")
    if in_case and (item.unless or item.fallback):
        raise DeclarationError(item.line, "a union case's fields take `default=` only")
    if item.required_without and item.only_without:
        raise DeclarationError(item.line, "`required-without` or `only-without`, not both")
    if item.unless:
        other = earlier.get(item.unless)
        if not isinstance(other, Field):
            raise DeclarationError(item.line, f"`{item.unless}` must be a field declared above `{item.name}`")
        if not other.optional or other.unless:
            raise DeclarationError(item.line, f"`{item.unless}` must be a plain optional field")
        if item.optional or item.default is None:
            raise DeclarationError(
                item.line, f"`{item.name}` needs a non-optional type and `default=` (its value while it is left out)"
            )
    if item.fallback:
        fallback_key, fallback_codec = item.fallback
        codecs.check(item, fallback_codec, fallback=True)
        if item.optional or item.required_without or (item.default is not None and not item.only_without):
            raise DeclarationError(item.line, "`or=` is for a required field (with `only-without=` at most)")
        if not codecs.can_read_if_present(item.codec):
            raise DeclarationError(item.line, f"a `{item.codec}` field cannot have `or=`")


# MARK: - Swift


def utf8_key(key: str) -> bytes:
    return key.encode("utf-8")


class Writer:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, indent: int, text: str = "") -> None:
        line = "    " * indent + text if text else ""
        if len(line) > LINE_LENGTH:
            raise ValueError(f"generated line longer than {LINE_LENGTH}: {line.strip()}")
        self.lines.append(line)

    def docs(self, indent: int, docs: list[str]) -> None:
        for doc in docs:
            self(indent, doc)


def lower_camel(name: str) -> str:
    return name[:1].lower() + name[1:]


def field_read(codecs: Codecs, item: Field, out: Writer, indent: int) -> None:
    """Statements assigning `item` from `fields`."""
    name = item.name
    if item.fallback:
        fallback_key, fallback_codec = item.fallback
        bound, made = codecs.if_present_bound(item.codec, item.key)
        keyword = "if"
        if item.only_without:
            out(indent, f"if {item.only_without} != nil {{")
            out(indent + 1, f"{name} = {item.default}")
            keyword = "} else if"
        out(indent, f"{keyword} let value = {bound} {{")
        out(indent + 1, f"{name} = {made}")
        out(indent, "} else {")
        out(indent + 1, f"{name} = {codecs.required(fallback_codec, fallback_key)}")
        out(indent, "}")
    elif item.only_without:
        out(indent, f"if {item.only_without} != nil {{")
        out(indent + 1, f"{name} = {item.default}")
        out(indent, "} else {")
        out(indent + 1, f"{name} = {codecs.required(item.codec, item.key)}")
        out(indent, "}")
    elif item.required_without:
        out(indent, f"if {item.required_without} == nil {{")
        out(indent + 1, f"{name} = {codecs.required(item.codec, item.key)}")
        out(indent, "} else {")
        out(indent + 1, f"{name} = {codecs.if_present(item.codec, item.key)} ?? {item.default}")
        out(indent, "}")
    else:
        out(indent, f"{name} = {value_read(codecs, item)}")


def value_read(codecs: Codecs, item: Field) -> str:
    """An expression reading a plain, optional or defaulted field."""
    if item.optional:
        return codecs.if_present(item.codec, item.key)
    if item.default is not None:
        return f"{codecs.if_present(item.codec, item.key)} ?? {item.default}"
    return codecs.required(item.codec, item.key)


def field_write(codecs: Codecs, item: Field, value: str) -> str:
    statement = codecs.write(item.codec, item.key, value, item.optional)
    if item.unless:
        return f"if {item.unless} == nil {{ {statement} }}"
    return statement


def generate(wrappers: dict[str, Wrapper], records: list[Record]) -> str:
    codecs = Codecs(wrappers)
    out = Writer()
    out(0, f"// Generated by scripts/wiregen.py from {DECLARATION.name}: do not edit. Declare a record's")
    out(0, "// fields in the declaration, run `python3 scripts/wiregen.py` and commit both files; the")
    out(0, "// hand-written rest of each record is in Records.swift.")
    for record in records:
        out(0)
        out.docs(0, record.docs)
        out(0, f"public struct {record.name}: WireObject, Equatable {{")
        for member in record.members:
            out.docs(1, member.docs)
            out(1, f"public var {member.name}: {member.type}")
        union = next((m for m in record.members if isinstance(m, Union)), None)
        if union is not None:
            generate_tag(union, out)

        # init(fields:): declaration order.
        out(0)
        out.docs(1, record.init_docs)
        out(1, "public init(fields: WireFields) throws {")
        for member in record.members:
            if isinstance(member, Field):
                field_read(codecs, member, out, 2)
                continue
            out(2, f'switch try fields.named("{member.key}") as {member.tag_type} {{')
            for case in member.cases:
                out(2, f"case .{case.name}:")
                arguments = [f"{item.name}: {value_read(codecs, item)}" for item in case.fields]
                single = f"{member.name} = .{case.name}({', '.join(arguments)})"
                if len(arguments) <= 1 and len("    " * 3 + single) <= LINE_LENGTH:
                    out(3, single)
                else:
                    out(3, f"{member.name} = .{case.name}(")
                    for index, argument in enumerate(arguments):
                        out(4, argument + ("," if index < len(arguments) - 1 else ")"))
            out(2, "}")
        out(1, "}")

        # write(to:): ascending byte order of the keys.
        out(0)
        out.docs(1, record.write_docs)
        out(1, "public func write(to object: inout JSONObjectWriter) {")
        common = [(m.key, field_write(codecs, m, m.name)) for m in record.members if isinstance(m, Field)]
        if union is None:
            for _, statement in sorted(common, key=lambda entry: utf8_key(entry[0])):
                out(2, statement)
        else:
            out(2, f"switch {union.name} {{")
            for case in union.cases:
                bindings = ", ".join(f"let {item.name}" for item in case.fields)
                out(2, f"case .{case.name}({bindings}):" if bindings else f"case .{case.name}:")
                statements = list(common)
                statements.append((union.key, f'object.field("{union.key}", {union.tag_type}.{case.name})'))
                statements += [(item.key, field_write(codecs, item, item.name)) for item in case.fields]
                for _, statement in sorted(statements, key=lambda entry: utf8_key(entry[0])):
                    out(3, statement)
            out(2, "}")
        out(1, "}")
        out(0, "}")
    return "\n".join(out.lines) + "\n"


def generate_tag(union: Union, out: Writer) -> None:
    out(0)
    out(1, f"/// Which case `{union.name}` is, as `{union.key}` names it on the wire.")
    out(1, f"public enum {union.tag_type}: String, Sendable {{")
    for case in union.cases:
        out.docs(2, case.docs)
        out(2, f"case {case.name}" if case.tag == case.name else f'case {case.name} = "{case.tag}"')
    out(1, "}")
    out(0)
    out(1, f"public var {lower_camel(union.tag_type)}: {union.tag_type} {{")
    out(2, f"switch {union.name} {{")
    for case in union.cases:
        out(2, f"case .{case.name}: .{case.name}")
    out(2, "}")
    out(1, "}")


# MARK: - Rules: what each record's reader needs and its writer writes (--rules)
#
# Per record, per key (a union's cases each have their own keys):
#   type          string, int, object, array or any (a `json` value, null included)
#   required      true: the reader throws when the key is absent (or null, unless `any`)
#   unless        keys whose presence (not null) lifts `required`: `required-without=F`
#                 and `only-without=F` give F; `or=KEY2` gives KEY2 to KEY, KEY to KEY2
#   ignoredWith   keys whose presence means this key is not read at all (`only-without=F`:
#                 F; the `or=` fallback KEY2: KEY and F)
#   written       always, maybe (an optional: when set) or never (an `or=` fallback)
#   writtenUnless with `always`: left out while one of these keys is written
#   names         a `named` codec: the only names the reader accepts (sorted)
#   elements      an array's element type (int), when its elements are not records
#   record        an `object` or `objects` key: the record its value (or each element) is


def swift_string_enums(directory: Path) -> dict[str, list[list[str]]]:
    """The raw values of each `enum NAME: String` in the Swift files of `directory` (one
    list per enum of that name: a nested enum's name need not be unique), and of each
    `enum NAME: RawRepresentable` whose `rawValue` is a switch of `case .x: "name"` or
    `case .x: Other.y.rawValue` (a name declared once in another enum, `Other`)."""
    found: dict[str, list[list[str]]] = {}
    by_case: dict[str, dict[str, str]] = {}
    derived: list[tuple[str, list[str]]] = []
    for path in sorted(directory.glob("*.swift")):
        text = path.read_text(encoding="utf-8")
        for m in re.finditer(rf"\benum\s+({IDENTIFIER})\s*:\s*String\b[^{{]*\{{", text):
            depth, names, cases = 1, [], {}
            for line in text[m.end():].splitlines():
                code = line.split("//", 1)[0]
                if depth == 1 and (case := re.match(r"\s*case\s+(.+)$", code)):
                    for item in case.group(1).split(","):
                        name, _, raw = item.partition("=")
                        value = raw.strip().strip('"') if raw else name.strip().strip("`")
                        names.append(value)
                        cases[name.strip().strip("`")] = value
                depth += code.count("{") - code.count("}")
                if depth <= 0:
                    break
            found.setdefault(m.group(1), []).append(names)
            by_case[m.group(1)] = cases
        for m in re.finditer(rf"\benum\s+({IDENTIFIER})\s*:\s*RawRepresentable\b[^{{]*\{{", text):
            body = text[m.end():]
            switch = re.search(r"var rawValue: String \{\s*switch self \{(.*?)\n\s*\}", body, re.S)
            if switch is None:
                raise ValueError(f"{path.name}: `enum {m.group(1)}: RawRepresentable` without a `rawValue` switch")
            derived.append((m.group(1), switch.group(1).splitlines()))
    for name, lines in derived:
        names = []
        for line in lines:
            if literal := re.match(r'\s*case \.\w+: "([^"]*)"\s*$', line):
                names.append(literal.group(1))
            elif reference := re.match(rf"\s*case \.\w+: ({IDENTIFIER})\.({IDENTIFIER})\.rawValue\s*$", line):
                names.append(by_case[reference.group(1)][reference.group(2)])
            elif line.strip():
                raise ValueError(f"`enum {name}`'s rawValue: cannot read `{line.strip()}`")
        found.setdefault(name, []).append(names)
    return found


# The JSON type each codec reads (the rest read arrays).
JSON_TYPES = {
    "string": "string",
    "utf8": "string",
    "named": "string",
    "int": "int",
    "int64": "int",
    "object": "object",
    "json": "any",
    "canonical": "any",
}

# DeliveryClass is written by hand (Provider.swift): its rules too, checked against its
# `init(fields:)` so the two cannot drift apart.
DELIVERY_CLASS_RULES = {
    "apns_priority": {"type": "int", "required": False, "written": "maybe"},
    "apns_push_type": {"type": "string", "required": True, "written": "always"},
    "fcm_priority": {"type": "string", "required": False, "written": "maybe"},
}


def check_delivery_class(directory: Path) -> None:
    text = (directory / "Provider.swift").read_text(encoding="utf-8")
    start = text.find("public struct DeliveryClass")
    reader = re.search(r"public init\(fields: WireFields\) throws \{(.*?)\n    \}", text[start:], re.S)
    if start < 0 or reader is None:
        raise ValueError("Provider.swift: DeliveryClass's init(fields:) not found")
    read = {
        key: {"type": "string" if codec == "string" else "int", "required": not present}
        for codec, present, key in re.findall(r'fields\.(string|int|int64)\((ifPresent: )?"([^"]+)"\)', reader.group(1))
    }
    table = {key: {"type": rule["type"], "required": rule["required"]} for key, rule in DELIVERY_CLASS_RULES.items()}
    if read != table:
        raise ValueError(f"DELIVERY_CLASS_RULES in wiregen.py ({table}) differ from DeliveryClass's reader ({read})")


def rules(wrappers: dict[str, Wrapper], records: list[Record], enums: dict[str, list[list[str]]]) -> dict:
    def bare(type_: str) -> str:
        return type_.rstrip("?").strip("[]")

    def json_type(codec: str) -> str:
        if codec in wrappers:
            return "string" if wrappers[codec].base == "string" else "int"
        return JSON_TYPES.get(codec, "array")  # int64s, objects, [W]

    def key_rule(item: Field, codec: str, required: bool) -> dict:
        rule: dict = {"type": json_type(codec), "required": required}
        if codec == "named":
            candidates = enums.get(bare(item.type), [])
            if len(candidates) != 1:
                raise DeclarationError(
                    item.line, f"{len(candidates)} `enum {bare(item.type)}: String` (or RawRepresentable) in {SWIFT_SOURCES}, not one"
                )
            rule["names"] = sorted(candidates[0])
        if codec in ("object", "objects"):
            rule["record"] = bare(item.type)
        elif codec == "int64s" or codec.startswith("["):
            rule["elements"] = "int"
        return rule

    def field_rules(item: Field, key_of: dict[str, str]) -> dict[str, dict]:
        plain = not item.optional and item.default is None
        rule = key_rule(item, item.codec, plain or item.unless is not None)
        rule["written"] = "maybe" if item.optional else "always"
        unless = [key_of[item.unless]] if item.unless else []
        if unless:
            rule["writtenUnless"] = unless
        if item.only_without:
            rule["ignoredWith"] = unless
        out = {item.key: rule}
        if item.fallback:
            fallback_key, fallback_codec = item.fallback
            rule["required"] = True
            out[fallback_key] = key_rule(item, fallback_codec, True) | {
                "written": "never", "unless": sorted(unless + [item.key]), "ignoredWith": sorted(unless + [item.key])
            }
            unless = unless + [fallback_key]
        if unless and rule["required"]:
            rule["unless"] = sorted(unless)
        return out

    described: dict[str, dict] = {"DeliveryClass": {"keys": DELIVERY_CLASS_RULES}}
    for record in records:
        keys: dict[str, dict] = {}
        key_of: dict[str, str] = {}
        entry: dict = {"keys": keys}
        for member in record.members:
            key_of[member.name] = member.key
            if isinstance(member, Field):
                keys.update(field_rules(member, key_of))
                continue
            tags = sorted(case.tag for case in member.cases)
            keys[member.key] = {"type": "string", "required": True, "names": tags, "written": "always"}
            cases = {case.tag: {} for case in member.cases}
            for case in member.cases:
                for item in case.fields:
                    cases[case.tag].update(field_rules(item, {}))
            entry["union"] = {"key": member.key, "cases": cases}
        described[record.name] = entry
    return {
        "about": "The records' reading and writing rules (scripts/wiregen.py --rules): docs/compatibility.md",
        "format": 1,
        "records": described,
    }


def rules_json(wrappers: dict[str, Wrapper], records: list[Record]) -> str:
    check_delivery_class(ROOT / SWIFT_SOURCES)
    described = rules(wrappers, records, swift_string_enums(ROOT / SWIFT_SOURCES))

    # Sorted keys, one key's rule a line: a change reads as a one-line diff.
    def dump(value: object, indent: int) -> str:
        if isinstance(value, dict) and value and any(isinstance(v, dict) for v in value.values()):
            inner = "  " * (indent + 1)
            items = [f"{inner}{json.dumps(k)}: {dump(v, indent + 1)}" for k, v in sorted(value.items())]
            return "{\n" + ",\n".join(items) + "\n" + "  " * indent + "}"
        return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(", ", ": "))

    return dump(described, 0) + "\n"


# MARK: - Main


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--check", action="store_true", help="exit 1 if the committed output differs from what would be generated"
    )
    parser.add_argument(
        "--rules", action="store_true", help=f"print the records' reading and writing rules (committed as {RULES})"
    )
    arguments = parser.parse_args()
    try:
        wrappers, records = parse((ROOT / DECLARATION).read_text(encoding="utf-8"))
        validate(wrappers, records)
        swift = generate(wrappers, records)
        described = rules_json(wrappers, records) if arguments.check or arguments.rules else ""
    except (DeclarationError, ValueError) as error:
        print(f"wiregen: {error}", file=sys.stderr)
        return 2
    if arguments.rules:
        sys.stdout.write(described)
        return 0
    target = ROOT / OUTPUT
    if arguments.check:
        stale = 0
        for path, expected, remedy in [
            (OUTPUT, swift, "python3 scripts/wiregen.py"),
            (RULES, described, f"python3 scripts/wiregen.py --rules > {RULES}"),
        ]:
            current = (ROOT / path).read_text(encoding="utf-8") if (ROOT / path).exists() else ""
            if current == expected:
                print(f"wiregen: {path} is up to date")
                continue
            diff = difflib.unified_diff(
                current.splitlines(keepends=True),
                expected.splitlines(keepends=True),
                f"{path} (committed)",
                f"{path} (from {DECLARATION})",
            )
            sys.stderr.writelines(diff)
            print(
                f"wiregen: {path} is not what {DECLARATION} generates: run `{remedy}` and commit the result",
                file=sys.stderr,
            )
            stale = 1
        return stale
    target.parent.mkdir(parents=True, exist_ok=True)
    if not target.exists() or target.read_text(encoding="utf-8") != swift:
        target.write_text(swift, encoding="utf-8")
        print(f"wiregen: wrote {OUTPUT}")
    else:
        print(f"wiregen: {OUTPUT} unchanged")
    return 0


if __name__ == "__main__":
    sys.exit(main())

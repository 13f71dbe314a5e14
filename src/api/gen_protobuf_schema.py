#!/usr/bin/env python3
"""Writes src/api/protobuf_schema.rs: the protobuf message descriptors berth decodes.

Field numbers and wire types come from the prost code of the `k8s-pb` crate (generated from
Kubernetes' generated.proto files); JSON field names from the serde code of `k8s-openapi`.
Both are read from the cargo registry's source copies, so fetch them first (for example by
adding them to a scratch project and running `cargo fetch`).

Which scalar fields leave out their zero value comes from the Go API types of k8s.io/api and
of k8s.io/apimachinery's pkg/apis/meta/v1, read from bare git mirrors of the two repositories
at one tag (as src/registry/gen_patch_meta.py reads them). Go's gogo-protobuf writes every
non-pointer scalar, zero or not, while kube-apiserver's JSON of the same object leaves a zero
out where the Go field is not a pointer and its json tag says `omitempty` (or `omitzero`):
those fields get `omitempty(...)` in the descriptors, the rest `one(...)`. The struct and the
field are found by the message name and the field number of the `protobuf:"..."` tag.

Usage: src/api/gen_protobuf_schema.py K8S_PB_DIR K8S_OPENAPI_DIR/src/v1_NN \
         K8S_API_GIT_DIR APIMACHINERY_GIT_DIR [TAG] \
         | rustfmt --edition 2024 > src/api/protobuf_schema.rs
where the two git directories are clones (bare ones do) of github.com/kubernetes/api and
github.com/kubernetes/apimachinery that have the tag (default v0.37.0-beta.0).
Notes (fields not found, names that disagree) go to stderr.
"""
import os
import re
import subprocess
import sys

# The kinds berth decodes from protobuf request bodies are every kind k8s-pb knows as a
# resource (found below, from its `impl crate::Resource` blocks), whatever its group and
# version, so that a kind berth serves, now or later, needs no edit here; and these, which
# are no resource of their own but arrive as bodies too: (apiVersion, kind, module, message).
EXTRA_ROOTS = [
    ("autoscaling/v1", "Scale", "api.autoscaling.v1", "Scale"),
    ("policy/v1", "Eviction", "api.policy.v1", "Eviction"),
    ("authentication.k8s.io/v1", "TokenRequest", "api.authentication.v1", "TokenRequest"),
    # Sent under the version of the client's group ("v1" by the core client).
    ("*", "DeleteOptions", "apimachinery.pkg.apis.meta.v1", "DeleteOptions"),
]

# Messages with an encoding of their own in JSON.
SPECIAL = {
    "apimachinery.pkg.api.resource.Quantity": "Quantity",
    "apimachinery.pkg.util.intstr.IntOrString": "IntOrString",
    "apimachinery.pkg.apis.meta.v1.Time": "Time",
    "apimachinery.pkg.apis.meta.v1.MicroTime": "MicroTime",
    "apimachinery.pkg.apis.meta.v1.Duration": "Duration",
    "apimachinery.pkg.apis.meta.v1.FieldsV1": "RawJson",
    "apimachinery.pkg.runtime.RawExtension": "RawJson",
}

# Go structs embedded in others: their fields are inlined in the JSON of the outer one.
# k8s-openapi has no struct of their own for some; their JSON names are the outer one's.
EMBEDDED = {
    "LocalObjectReference": "LocalObjectReference",
    "VolumeSource": "Volume",
    "ProbeHandler": "Probe",
    "EphemeralContainerCommon": "EphemeralContainer",
    "IngressRuleValue": "IngressRule",
    "PersistentVolumeSource": "PersistentVolumeSpec",
}

SCALARS = {"string": "Str", "int32": "Int", "int64": "Int", "bool": "Bool", "bytes": "Bytes", "double": "Double"}

pb_root, openapi_root, api_git, machinery_git = sys.argv[1:5]
tag = sys.argv[5] if len(sys.argv) > 5 else "v0.37.0-beta.0"

# Files that hold no hand-written API structs.
GENERATED = re.compile(r"(_test\.go|generated\.pb\.go|_generated\.go|^zz_generated\..*\.go)$")
TAG_KEY = re.compile(r'(\w+):"([^"]*)"')


def resource_roots():
    """Every `impl crate::Resource for X` of k8s-pb: (apiVersion, kind, module, message)."""
    roots = []
    base = os.path.join(pb_root, "src")
    for dirpath, _, files in sorted(os.walk(os.path.join(base, "api"))):
        if "mod.rs" not in files:
            continue
        module = ".".join(os.path.relpath(dirpath, base).split(os.sep))
        text = open(os.path.join(dirpath, "mod.rs")).read()
        for m in re.finditer(r"impl crate::Resource for (\w+) \{(.*?)\n\}", text, re.S):
            consts = dict(re.findall(r'const (\w+): &\'static str = "([^"]*)";', m.group(2)))
            roots.append((consts["API_VERSION"], consts["KIND"], module, m.group(1)))
    return sorted(roots)


def pb_file(module):
    return os.path.join(pb_root, "src", *module.split("."), "mod.rs")


def parse_pb(module):
    """Messages of a module: name -> [(number, rust field, scalar or None, type path, card)]."""
    text = open(pb_file(module)).read()
    out = {}
    # An empty struct is written `{}` on one line.
    for m in re.finditer(r"pub struct (\w+) \{(?:\}|(.*?)\n\})", text, re.S):
        fields = []
        for chunk in (m.group(2) or "").split("#[prost(")[1:]:
            attr, rest = chunk.split(")]", 1)
            rest = "\n".join(l for l in rest.splitlines() if not l.strip().startswith("//"))
            f = re.match(r"\s*pub (r#)?(\w+):(.*)$", rest, re.S)
            name, ty = f.group(2), re.sub(r"\s+", "", f.group(3)).rstrip(",")
            number = int(re.search(r'tag = "(\d+)"', attr).group(1))
            head = attr.split(",")[0].strip()
            if head.startswith("btree_map"):
                value = re.search(r'btree_map = "string, (\w+)"', attr).group(1)
                if value == "message":
                    inner = re.search(r"BTreeMap<::prost::alloc::string::String,(.*?),?>$", ty).group(1)
                    fields.append((number, name, None, inner, "map"))
                else:
                    fields.append((number, name, value, None, "map"))
                continue
            card = "repeated" if "repeated" in attr else "one"
            if head == "message":
                inner = re.search(r"(?:Option|Vec)<(.*)>$", ty).group(1).rstrip(",")
                fields.append((number, name, None, inner, card))
            else:
                kind = head.split("=")[0].strip()
                fields.append((number, name, kind, None, card))
        out[m.group(1)] = fields
    return out


def git(repo, *args):
    run = subprocess.run(["git", "-C", repo, *args], check=True, capture_output=True, text=True)
    return run.stdout


go_packages = {}  # proto module -> {struct, lowercased: {field number: (json, pointer, omit)}}


def go_fields(module, message):
    """The Go fields of a message's struct by protobuf field number: (JSON name, whether its
    type is a pointer, whether its json tag says omitempty or omitzero); None if the struct
    is not found. The proto module api.core.v1 is k8s.io/api's core/v1 and
    apimachinery.pkg.apis.meta.v1 apimachinery's pkg/apis/meta/v1; k8s-pb spells the
    message names its own way (PodOs for PodOS), so they are matched ignoring case."""
    if module not in go_packages:
        head, *rest = module.split(".")
        repo = {"api": api_git, "apimachinery": machinery_git}[head]
        path = "/".join(rest)
        structs = {}
        try:
            files = git(repo, "ls-tree", "--name-only", f"{tag}:{path}").split()
        except subprocess.CalledProcessError:
            files = []
        for fn in files:
            if not fn.endswith(".go") or GENERATED.search(fn):
                continue
            text = git(repo, "show", f"{tag}:{path}/{fn}")
            # gofmt puts a struct's closing brace, and only that one, at the line start.
            for m in re.finditer(r"^type (\w+) struct \{\n(.*?)^\}", text, re.S | re.M):
                fields = {}
                for line in m.group(2).splitlines():
                    line = line.strip()
                    if line.startswith("//") or "`" not in line:
                        continue
                    code, tagtext = line.split("`", 1)
                    tags = dict(TAG_KEY.findall(tagtext.rsplit("`", 1)[0]))
                    pb = re.match(r"\w+,(\d+),", tags.get("protobuf", ""))
                    if not pb:  # no protobuf field, or `protobuf:"-"`
                        continue
                    words = code.split()
                    number = int(pb.group(1))
                    json, *opts = tags.get("json", "").split(",")
                    omit = "omitempty" in opts or "omitzero" in opts
                    fields[number] = (json, words[-1].startswith("*"), omit)
                # meta/v1 FieldsV1 is declared once per build tag; the first one is kept.
                structs.setdefault(m.group(1).lower(), fields)
        go_packages[module] = structs
    return go_packages[module].get(message.lower())


def resolve(module, path):
    parts = module.split(".")
    segs = path.split("::")
    if segs and segs[0] == "":
        segs = segs[1:]
    while segs and segs[0] == "super":
        parts.pop()
        segs.pop(0)
    return ".".join(parts + segs[:-1]), segs[-1]


def json_names(module, message):
    """The JSON names of a message's fields, by rust field name, from k8s-openapi."""
    d = os.path.join(openapi_root, *module.split("."))
    if not os.path.isdir(d):
        return {}
    for fn in os.listdir(d):
        if not fn.endswith(".rs"):
            continue
        text = open(os.path.join(d, fn)).read()
        structs = re.findall(r"pub struct (\w+) \{", text)
        if message.lower() in (n.lower() for n in structs):
            return {norm(k): j for j, k in re.findall(r'"(\w+)" => Field::Key_(\w+),', text)}
    return {}


def norm(rust):
    """Rust field names of the two crates split words differently (pod_cid_rs, pod_cidrs)."""
    return rust.replace("_", "").lower()


def camel(name):
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


modules = {}
messages = {}  # (module, name) -> list of (number, json, card, kind)
ROOTS = resource_roots() + EXTRA_ROOTS
todo = [(m, n) for _, _, m, n in ROOTS]
missing = []
while todo:
    module, name = todo.pop()
    if (module, name) in messages:
        continue
    if module not in modules:
        modules[module] = parse_pb(module)
    names = json_names(module, EMBEDDED.get(name, name))
    go = go_fields(module, name) or {}
    fields = []
    for number, rust, scalar, path, card in modules[module][name]:
        json = names.pop(norm(rust), None)
        if json is None and path is not None and resolve(module, path)[1] in EMBEDDED:
            card = "inline"
        elif json is None:
            json = camel(rust)
            missing.append(f"{module}.{name}.{rust}")
        omit = False
        if scalar:
            kind = SCALARS[scalar]
            if card == "one":
                if number not in go:
                    missing.append(f"{module}.{name}.{rust}: no Go field; its zero value is kept")
                else:
                    go_json, pointer, omitempty = go[number]
                    if go_json != json:
                        missing.append(f"{module}.{name}.{rust}: JSON name {go_json} in Go")
                    omit = omitempty and not pointer
        else:
            target = resolve(module, path)
            full = ".".join(target)
            if full in SPECIAL:
                kind = SPECIAL[full]
            else:
                kind = "Message(&%s)" % ident(*target) if False else ("Message", target)
                todo.append(target)
        fields.append((number, json, "omitempty" if omit else card, kind))
    for json in names.values():
        missing.append(f"{module}.{name}: no field number for JSON field {json}")
    messages[(module, name)] = sorted(fields)


def ident(module, name):
    tail = module.split(".")
    if tail[0] == "apimachinery":
        tail = tail[-2:]
    else:
        tail = tail[1:]
    snake = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name)
    snake = re.sub(r"(?<=[A-Z])([A-Z][a-z])", r"_\1", snake)
    return "_".join(tail + [snake]).upper()


def kind_str(kind):
    if isinstance(kind, tuple):
        return "Message(&%s)" % ident(*kind[1])
    return kind


for m in missing:
    print("note:", m, file=sys.stderr)

print("//! Protobuf descriptors of the kinds berth accepts in protobuf request bodies: for each")
print("//! message, its field numbers with their JSON names and encodings. Generated by")
print("//! `src/api/gen_protobuf_schema.py` from Kubernetes' generated.proto definitions (field")
print("//! numbers, as the k8s-pb crate carries them), the JSON names of k8s-openapi and, for")
print("//! which scalars leave out their zero value (`omitempty`), the Go types of k8s.io/api and")
print(f"//! k8s.io/apimachinery (tag {tag}); edit the root list there and run it again rather")
print("//! than editing this file.")
print()
print("use super::protobuf::Kind::*;")
print("use super::protobuf::{Message, inline, map, omitempty, one, rep};")
print()
print("/// The messages of the kinds that may arrive as protobuf: (apiVersion, kind, message);")
print("/// `*` matches any apiVersion.")
print("pub static ROOTS: &[(&str, &str, &Message)] = &[")
for api, kind, module, name in ROOTS:
    print(f'    ("{api}", "{kind}", &{ident(module, name)}),')
print("];")
for (module, name), fields in sorted(messages.items(), key=lambda kv: ident(*kv[0])):
    print()
    print(f"pub static {ident(module, name)}: Message = Message {{")
    print(f'    name: "{module}.{name}",')
    print("    fields: &[")
    for number, json, card, kind in fields:
        if card == "inline":
            print(f"        inline({number}, &{ident(*kind[1])}),")
        else:
            fn = {"one": "one", "omitempty": "omitempty", "repeated": "rep", "map": "map"}[card]
            print(f'        {fn}({number}, "{json}", {kind_str(kind)}),')
    print("    ],")
    print("};")

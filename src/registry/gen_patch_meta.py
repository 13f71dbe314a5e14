#!/usr/bin/env python3
"""Writes src/registry/patch_meta.rs: how Kubernetes merges the list and map fields of its types.

For strategic merge patch, the `patchStrategy` and `patchMergeKey` struct tags; for server-side
apply, the `+listType`, `+listMapKey`, `+mapType` and `+structType` markers of the comments
above each field (and `+structType=atomic` above a type). All come from the Go API types of
k8s.io/api (every group/version package, alpha and beta too) and of apimachinery's
pkg/apis/meta/v1, read from bare git mirrors of the two repositories at one tag. Types are
named by their OpenAPI schema name (io.k8s.api.core.v1.ServiceSpec,
io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta), as k8s-openapi names them; fields by their
JSON name.

Go structs embedded without a JSON name (`VolumeSource `json:""``) have their fields in the
JSON of the embedding struct, so their rules are given under the embedding type too; structs
that are only ever embedded (VolumeSource, ProbeHandler, EphemeralContainerCommon, ...) have no
schema of their own and get no rows of their own. Embedded structs of another package read here
are followed, through type aliases too (admissionregistration/v1beta1 embeds its
`RuleWithOperations = v1.RuleWithOperations`); metav1.TypeMeta and the like carry no rules.

Usage: src/registry/gen_patch_meta.py K8S_API_GIT_DIR APIMACHINERY_GIT_DIR [TAG] \
         | rustfmt --edition 2024 > src/registry/patch_meta.rs
where the two directories are clones (bare ones do) of github.com/kubernetes/api and
github.com/kubernetes/apimachinery that have the tag (default v0.37.0-beta.0).
Notes (disagreeing markers, shadowed fields) go to stderr.
"""
import re
import subprocess
import sys

api_git, machinery_git = sys.argv[1], sys.argv[2]
tag = sys.argv[3] if len(sys.argv) > 3 else "v0.37.0-beta.0"

# Group/version package directories of k8s.io/api: core/v1, apps/v1beta2, autoscaling/v2, ...
VERSION_DIR = re.compile(r"^[a-z0-9]+/v\d+(?:(?:alpha|beta)\d+)?$")
# Files that hold no hand-written API structs.
GENERATED = re.compile(r"(_test\.go|generated\.pb\.go|_generated\.go|^zz_generated\..*\.go)$")
MARKER = re.compile(r"^//\s*\+([A-Za-z]+)=(.*?)\s*$")
TAG_KEY = re.compile(r'(\w+):"([^"]*)"')
MODEL_NAME = re.compile(r'func \(in (\w+)\) OpenAPIModelName\(\) string \{\s*return "([^"]+)"')


def git(repo, *args):
    run = subprocess.run(["git", "-C", repo, *args], check=True, capture_output=True, text=True)
    return run.stdout


def note(msg):
    print("note:", msg, file=sys.stderr)


def markers(comments):
    """`+key=value` markers of a comment block: key -> [values], in order."""
    out = {}
    for c in comments:
        m = MARKER.match(c)
        if m:
            out.setdefault(m.group(1), []).append(m.group(2).strip())
    return out


def parse_go(text):
    """Struct types of a Go file: name -> (type markers, [field]), where a field is
    ("named", json name, type expression, tag dict, markers) or ("embed", type, tag dict);
    and its type aliases: name -> aliased type (`type Rule = v1.Rule`)."""
    structs, aliases = {}, {}
    comments, prev_comments = [], []
    current = None  # (name, fields) while inside a struct
    depth = 0
    for raw in text.splitlines():
        line = raw.strip()
        if current is None:
            if line.startswith("//"):
                comments.append(line)
                continue
            m = re.match(r"^type (\w+) struct\s*\{(.*)$", line)
            if m:
                # gengo reads a type's markers from its doc comment and from the comment
                # block before that one (separated by a blank line).
                tm = markers(prev_comments + comments)
                current = (m.group(1), tm, [])
                structs[m.group(1)] = (tm, current[2])
                depth = 1
                if m.group(2).strip().startswith("}"):  # struct{}
                    current, depth = None, 0
            m = re.match(r"^type (\w+) = ([\w.]+)\s*$", line)
            if m:
                aliases[m.group(1)] = m.group(2)
            if line == "":
                prev_comments, comments = comments, []
            else:
                prev_comments, comments = [], []
            continue
        # inside a struct
        if line.startswith("//"):
            comments.append(line)
            continue
        if line == "":
            comments = []
            continue
        code = line.split("//", 1)[0] if "`" not in line else line
        if depth > 1:  # a nested anonymous struct: its fields are skipped
            depth += code.count("{") - code.count("}")
            comments = []
            continue
        if code.startswith("}"):
            current, depth, comments, prev_comments = None, 0, [], []
            continue
        if "struct {" in code or "struct{" in code:
            if not code.rstrip().endswith("}"):
                note(f"{current[0]}: nested anonymous struct skipped: {line}")
                depth += code.count("{") - code.count("}")
            comments = []
            continue
        if "`" not in line:
            comments = []
            continue
        head, tagtext = line.split("`", 1)
        tags = dict(TAG_KEY.findall(tagtext.rsplit("`", 1)[0]))
        words = head.split()
        fm = markers(comments)
        comments = []
        json = tags.get("json", "").split(",")[0]
        if len(words) == 1:
            if json:  # an embedded struct under a JSON name of its own (ObjectMeta)
                current[2].append(("named", json, words[0], tags, fm))
            else:
                current[2].append(("embed", words[0].lstrip("*"), tags))
        elif len(words) == 2 and json and json != "-":
            current[2].append(("named", json, words[1], tags, fm))
    return structs, aliases


def imports(text):
    """A Go file's imports: package name -> import path."""
    out = {}
    for block in re.findall(r"^import \((.*?)^\)", text, re.S | re.M):
        for m in re.finditer(r'^\s*(\w+\s+)?"([^"]+)"', block, re.M):
            out[(m.group(1) or m.group(2).rsplit("/", 1)[-1]).strip()] = m.group(2)
    for m in re.finditer(r'^import (\w+\s+)?"([^"]+)"', text, re.M):
        out[(m.group(1) or m.group(2).rsplit("/", 1)[-1]).strip()] = m.group(2)
    return out


# Go import path -> package directory key, for the packages read.
def package_key(import_path):
    if import_path.startswith("k8s.io/api/"):
        return import_path[len("k8s.io/api/"):]
    if import_path == "k8s.io/apimachinery/pkg/apis/meta/v1":
        return "pkg/apis/meta/v1"
    return None


def read_package(repo, path):
    """The structs of one package, with the types they embed resolved to (package, name)
    where they are in a package read here, and the OpenAPI model names it declares."""
    structs, aliases, models = {}, {}, {}
    for fn in git(repo, "ls-tree", "--name-only", f"{tag}:{path}").split():
        if not fn.endswith(".go"):
            continue
        text = git(repo, "show", f"{tag}:{path}/{fn}")
        if fn == "zz_generated.model_name.go":
            models = dict(MODEL_NAME.findall(text))
        if GENERATED.search(fn):
            continue
        imp = imports(text)

        def qualify(t):
            if "." not in t:
                return (path, t)
            pkg, name = t.split(".", 1)
            key = package_key(imp.get(pkg, ""))
            return (key, name) if key else (None, t)

        found, al = parse_go(text)
        for name, (tm, fields) in found.items():
            fields = [("embed", qualify(f[1]), f[2]) if f[0] == "embed" else f for f in fields]
            if name in structs and structs[name] != (tm, fields):
                # meta/v1 FieldsV1 is declared once per build tag, alike but for the tags.
                note(f"{path}: struct {name} declared twice; keeping the first")
            structs.setdefault(name, (tm, fields))
        for name, target in al.items():
            aliases[name] = qualify(target)
    return structs, aliases, models


packages = []  # (schema prefix, repo, package path)
api_files = git(api_git, "ls-tree", "-r", "--name-only", tag).split()
api_dirs = sorted({p.rsplit("/", 1)[0] for p in api_files if "/" in p})
for d in api_dirs:
    if VERSION_DIR.match(d):
        packages.append(("io.k8s.api." + d.replace("/", ".") + ".", api_git, d))
packages.append(("io.k8s.apimachinery.pkg.apis.meta.v1.", machinery_git, "pkg/apis/meta/v1"))

STRUCTS, ALIASES = {}, {}  # (package, name) -> struct; (package, name) -> (package, name)
MODELS = {}  # package -> {name: model name}
for prefix, repo, path in packages:
    structs, aliases, models = read_package(repo, path)
    for name, s in structs.items():
        STRUCTS[(path, name)] = s
    for name, target in aliases.items():
        ALIASES[(path, name)] = target
    MODELS[path] = models


def resolve(ref):
    """The struct a (package, name) names, following type aliases."""
    seen = set()
    while ref in ALIASES and ref not in seen:
        seen.add(ref)
        ref = ALIASES[ref]
    return ref if ref in STRUCTS else None


# Structs named as a field's type somewhere in their package, and structs embedded inline.
referenced, embedded = set(), set()
for (path, name), (_, fields) in STRUCTS.items():
    for f in fields:
        if f[0] == "named":
            ident = re.findall(r"[\w.]+", f[2])
            if ident and "." not in ident[-1]:
                referenced.add((path, ident[-1]))
        elif resolve(f[1]):
            embedded.add(resolve(f[1]))


def rules(ref, seen=()):
    """A struct's fields with their rules, those of its inline-embedded structs included;
    a field of the struct itself shadows one of the same JSON name from an embedded one."""
    path, name = ref
    tm, fields = STRUCTS[ref]
    out = {}
    inherited = {}
    for f in fields:
        if f[0] == "embed":
            target = resolve(f[1])
            if target is None:
                # Only metav1.TypeMeta and time.Duration and the like: no rules there.
                if f[1][1].split(".")[-1] not in ("TypeMeta", "ListMeta", "Time", "Duration"):
                    note(f"{path}.{name}: embedded {f[1][1]} not found; skipped")
                continue
            if target in seen:
                continue
            for k, v in rules(target, seen + (ref,)).items():
                if k in inherited:
                    note(f"{path}.{name}: {k} embedded twice; keeping the first")
                else:
                    inherited[k] = v
            continue
        _, json, _, tags, fm = f
        strategy = tags.get("patchStrategy", "")
        key = tags.get("patchMergeKey", "")
        # The same rules are often written as comment markers as well; the tag decides.
        for tagname, value in (("patchStrategy", strategy), ("patchMergeKey", key)):
            for mv in fm.get(tagname, []):
                if value and mv != value:
                    note(f"{path}.{name}.{json}: tag {tagname}={value}, marker {mv}")
                if not value:
                    note(f"{path}.{name}.{json}: +{tagname}={mv} without the tag; using it")
        strategy = strategy or (fm.get("patchStrategy") or [""])[-1]
        key = key or (fm.get("patchMergeKey") or [""])[-1]
        for mk in ("listType", "mapType", "structType"):
            if len(set(fm.get(mk, []))) > 1:
                note(f"{path}.{name}.{json}: several +{mk}: {fm[mk]}; using the last")
        list_type = (fm.get("listType") or [""])[-1]
        map_keys = tuple(fm.get("listMapKey", []))
        map_type = (fm.get("mapType") or [""])[-1]
        struct_type = (fm.get("structType") or [""])[-1]
        if map_type and struct_type and map_type != struct_type:
            note(f"{path}.{name}.{json}: +mapType={map_type} and +structType={struct_type}")
        map_type = map_type or struct_type
        if strategy or key or list_type or map_keys or map_type:
            out[json] = (strategy, key, list_type, map_keys, map_type)
        elif json in inherited:
            out[json] = None  # shadows an embedded field with rules: none apply
    for k, v in inherited.items():
        if k in out:
            note(f"{path}.{name}.{k}: shadows the field of an embedded struct")
        else:
            out[k] = v
    return {k: v for k, v in out.items() if v is not None}


rows = {}  # (schema, field) -> (strategy, merge key, list type, map keys, map type)
atomic_types = set()
for prefix, repo, path in packages:
    models = MODELS[path]
    for (p, name), (tm, fields) in sorted(STRUCTS.items()):
        if p != path:
            continue
        if (path, name) in embedded and (path, name) not in referenced:
            if "structType" in tm:
                note(f"{path}.{name}: +structType on a struct that is only embedded")
            continue  # no schema of its own: its rules are under the embedding types
        s = prefix + name
        if models and models.get(name, s) != s:
            note(f"{path}.{name}: model name {models[name]}, not {s}; using the model name")
            s = models[name]
        if tm.get("structType", [""])[-1] == "atomic":
            atomic_types.add(s)
        for field, rule in rules((path, name)).items():
            # Schema names are unique across packages and JSON names within a struct, so
            # (schema, field) cannot repeat; if it ever did, the first one read is kept.
            if (s, field) in rows:
                note(f"{s}.{field}: duplicate row; keeping the first")
                continue
            rows[(s, field)] = rule


def q(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


print("//! How Kubernetes merges the list and map fields of its types: patch strategies and merge")
print("//! keys (strategic merge patch) and list types with their map keys (server-side apply), by")
print("//! OpenAPI schema name and JSON field name. Generated by `src/registry/gen_patch_meta.py`")
print(f"//! from the Go types of k8s.io/api and k8s.io/apimachinery (tag {tag}); run it")
print("//! again rather than editing this file.")
print()
print("/// One field's merge rules.")
print("pub struct Field {")
print("    /// The OpenAPI schema name of the type that has the field.")
print("    pub schema: &'static str,")
print("    /// The field's JSON name.")
print("    pub field: &'static str,")
print("    /// `patchStrategy`: `merge`, `retainKeys`, `merge,retainKeys`, `replace`, or empty.")
print("    pub strategy: &'static str,")
print("    /// `patchMergeKey`, or empty.")
print("    pub merge_key: &'static str,")
print("    /// `+listType`: `atomic`, `set`, `map`, or empty.")
print("    pub list_type: &'static str,")
print("    /// `+listMapKey`s, in order.")
print("    pub map_keys: &'static [&'static str],")
print("    /// `+mapType` or `+structType`: `atomic`, `granular`, or empty.")
print("    pub map_type: &'static str,")
print("}")
print()
print("/// Every field with a rule, sorted by schema then field (for binary search).")
print("pub static FIELDS: &[Field] = &[")
# Python sorts str by code point, which for these ASCII names is Rust's byte order.
for (s, field), (strategy, key, list_type, map_keys, map_type) in sorted(rows.items()):
    print("    Field {")
    print(f"        schema: {q(s)},")
    print(f"        field: {q(field)},")
    print(f"        strategy: {q(strategy)},")
    print(f"        merge_key: {q(key)},")
    print(f"        list_type: {q(list_type)},")
    print(f"        map_keys: &[{', '.join(q(k) for k in map_keys)}],")
    print(f"        map_type: {q(map_type)},")
    print("    },")
print("];")
print()
print("/// Types that are atomic as a whole (`+structType=atomic`), sorted.")
print("pub static ATOMIC_TYPES: &[&str] = &[")
for s in sorted(atomic_types):
    print(f"    {q(s)},")
print("];")
print()
print("/// The rules of a type's field, if it has any.")
print("pub fn find(schema: &str, field: &str) -> Option<&'static Field> {")
print("    FIELDS")
print("        .binary_search_by(|f| (f.schema, f.field).cmp(&(schema, field)))")
print("        .ok()")
print("        .map(|i| &FIELDS[i])")
print("}")
print()
print("/// Whether a type is atomic as a whole.")
print("pub fn is_atomic_type(schema: &str) -> bool {")
print("    ATOMIC_TYPES.binary_search(&schema).is_ok()")
print("}")
print(
    """
#[cfg(test)]
mod tests {
    use super::*;

    const CORE: &str = "io.k8s.api.core.v1.";
    const META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.";

    fn get(schema: &str, field: &str) -> &'static Field {
        find(schema, field).unwrap_or_else(|| panic!("no rules for {schema} {field}"))
    }

    #[test]
    fn sorted_and_unique() {
        for w in FIELDS.windows(2) {
            assert!((w[0].schema, w[0].field) < (w[1].schema, w[1].field), "{}", w[1].field);
        }
        for w in ATOMIC_TYPES.windows(2) {
            assert!(w[0] < w[1], "{}", w[1]);
        }
    }

    #[test]
    fn service_ports() {
        let f = get(&format!("{CORE}ServiceSpec"), "ports");
        assert_eq!(f.strategy, "merge");
        assert_eq!(f.merge_key, "port");
        assert_eq!(f.list_type, "map");
        assert_eq!(f.map_keys, ["port", "protocol"]);
    }

    #[test]
    fn containers() {
        let c = format!("{CORE}Container");
        assert_eq!(get(&c, "ports").merge_key, "containerPort");
        assert_eq!(get(&c, "env").merge_key, "name");
        assert_eq!(get(&c, "volumeMounts").merge_key, "mountPath");
        // EphemeralContainer has the fields of the EphemeralContainerCommon it embeds.
        assert_eq!(get(&format!("{CORE}EphemeralContainer"), "env").merge_key, "name");
        assert!(find("io.k8s.api.core.v1.EphemeralContainerCommon", "env").is_none());
    }

    #[test]
    fn pod_spec() {
        let p = format!("{CORE}PodSpec");
        assert_eq!(get(&p, "volumes").strategy, "merge,retainKeys");
        assert_eq!(get(&p, "volumes").merge_key, "name");
        assert_eq!(get(&p, "containers").merge_key, "name");
        assert!(find(&p, "nodeName").is_none());
    }

    #[test]
    fn object_meta() {
        let m = format!("{META}ObjectMeta");
        assert_eq!(get(&m, "finalizers").strategy, "merge");
        assert_eq!(get(&m, "finalizers").list_type, "set");
        assert_eq!(get(&m, "ownerReferences").merge_key, "uid");
        assert_eq!(get(&m, "ownerReferences").list_type, "map");
    }

    #[test]
    fn node_status() {
        let n = get(&format!("{CORE}NodeStatus"), "addresses");
        assert_eq!(n.strategy, "merge");
        assert_eq!(n.merge_key, "type");
    }

    #[test]
    fn atomic_types() {
        assert!(is_atomic_type("io.k8s.api.core.v1.LocalObjectReference"));
        assert!(is_atomic_type("io.k8s.apimachinery.pkg.apis.meta.v1.OwnerReference"));
        assert!(!is_atomic_type("io.k8s.api.core.v1.PodSpec"));
    }
}""",
    end="",
)
print()

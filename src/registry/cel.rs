//! The CEL validation rules of custom kinds (`x-kubernetes-validations`), compiled once per
//! served version with the `cel` crate and evaluated on every create and update.
//!
//! The environment is CEL's standard library with the `strings`, `lists` and `math`
//! extensions, and Kubernetes' own list and regex functions (`isSorted`, `sum`, `min`,
//! `max`, `indexOf`, `lastIndexOf`, `find`, `findAll`). A rule that calls anything else
//! (`quantity`, `url`, `ip`, `timestamp`, the authorizer, ...) or names a variable other
//! than `self` and `oldSelf` is refused when its definition is written, so no rule is ever
//! silently skipped.
//!
//! As kube-apiserver does, a rule sees the value of the node it is declared on: objects as
//! maps, and at the root only `apiVersion`, `kind`, `metadata.name` and
//! `metadata.generateName` of the metadata. Transition rules (those that read `oldSelf`)
//! run on updates where the old value can be correlated: through object properties, map
//! keys and the keys of `x-kubernetes-list-type: map` lists, never through the items of
//! other lists. A value an update leaves as it was is not checked again (ratcheting), so
//! a tightened rule does not lock old objects.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use cel::common::ast::{EntryExpr, Expr, IdedExpr};
use cel::common::types::STRING_TYPE;
use cel::common::types::{CelInt, CelList, CelOptional, CelString, DYN_TYPE, INT_TYPE, LIST_TYPE};
use cel::common::value::{CowVal, Val};
use cel::objects::{Key, Map as CelMap};
use cel::{Context, DeclarationError, Env, ExecutionError, Program, Value as CelValue};
use serde_json::{Value, json};

use super::Cause;

/// The functions (and operators) a rule may call, each with an expression that uses it and
/// evaluates to `true` in [`ENV`]: the unit tests run them all, so this list stays the
/// truth about what the environment evaluates.
const FUNCTIONS: &[(&str, &str)] = &[
    ("_==_", "1 == 1"),
    ("_!=_", "1 != 2"),
    ("_<_", "1 < 2"),
    ("_<=_", "1 <= 1"),
    ("_>_", "2 > 1"),
    ("_>=_", "2 >= 2"),
    (
        "_+_",
        "1 + 1 == 2 && 'a' + 'b' == 'ab' && [1] + [2] == [1, 2]",
    ),
    ("_-_", "3 - 1 == 2"),
    ("_*_", "2 * 3 == 6"),
    ("_/_", "6 / 3 == 2"),
    ("_%_", "5 % 3 == 2"),
    ("!_", "!false"),
    ("-_", "-(2 - 3) == 1"),
    ("_&&_", "true && true"),
    ("_||_", "false || true"),
    ("_?_:_", "true ? true : false"),
    ("_[_]", "[1, 2][1] == 2 && {'a': 1}['a'] == 1"),
    ("@in", "1 in [1, 2] && 'a' in {'a': 1}"),
    ("@not_strictly_false", "[1, 2].all(x, x > 0)"),
    ("_?._", "{'a': 1}.?a.hasValue()"),
    ("_[?_]", "!{'a': 1}[?'b'].hasValue()"),
    (
        "size",
        "size('abc') == 3 && 'ab'.size() == 2 && size([1]) == 1",
    ),
    ("contains", "'abc'.contains('b')"),
    ("startsWith", "'abc'.startsWith('a')"),
    ("endsWith", "'abc'.endsWith('c')"),
    ("matches", "'abc'.matches('^a.c$')"),
    ("string", "string(1) == '1'"),
    ("int", "int('2') == 2"),
    ("uint", "uint(2) == 2u"),
    ("double", "double(1) == 1.0"),
    ("bool", "bool('true')"),
    ("bytes", "bytes('a') == b'a'"),
    ("dyn", "dyn(1) == 1"),
    ("type", "type(1) == int"),
    ("optional.of", "optional.of(1).hasValue()"),
    ("optional.none", "!optional.none().hasValue()"),
    (
        "optional.ofNonZeroValue",
        "!optional.ofNonZeroValue(0).hasValue()",
    ),
    ("hasValue", "optional.of(1).hasValue()"),
    ("value", "optional.of(1).value() == 1"),
    ("orValue", "optional.none().orValue(2) == 2"),
    ("or", "optional.none().or(optional.of(3)).value() == 3"),
    ("charAt", "'abc'.charAt(1) == 'b'"),
    (
        "indexOf",
        "'abc'.indexOf('c') == 2 && [1, 2].indexOf(2) == 1",
    ),
    (
        "lastIndexOf",
        "'abca'.lastIndexOf('a') == 3 && [1, 1].lastIndexOf(1) == 1",
    ),
    ("join", "['a', 'b'].join('-') == 'a-b'"),
    ("lowerAscii", "'AB'.lowerAscii() == 'ab'"),
    ("upperAscii", "'ab'.upperAscii() == 'AB'"),
    ("trim", "' a '.trim() == 'a'"),
    ("replace", "'aa'.replace('a', 'b') == 'bb'"),
    ("split", "'a,b'.split(',') == ['a', 'b']"),
    ("substring", "'abc'.substring(1) == 'bc'"),
    ("format", "'%d items'.format([3]) == '3 items'"),
    ("strings.quote", "strings.quote('a') == '\"a\"'"),
    (
        "reverse",
        "'ab'.reverse() == 'ba' && [1, 2].reverse() == [2, 1]",
    ),
    ("slice", "[1, 2, 3].slice(1, 2) == [2]"),
    ("flatten", "[[1], [2]].flatten() == [1, 2]"),
    ("distinct", "[1, 1, 2].distinct() == [1, 2]"),
    ("sort", "[2, 1].sort() == [1, 2]"),
    ("@sortByAssociatedKeys", "[2, 1].sortBy(x, x) == [1, 2]"),
    ("lists.range", "lists.range(2) == [0, 1]"),
    ("math.abs", "math.abs(-1) == 1"),
    ("math.ceil", "math.ceil(1.2) == 2.0"),
    ("math.floor", "math.floor(1.8) == 1.0"),
    ("math.round", "math.round(1.5) == 2.0"),
    ("math.trunc", "math.trunc(1.8) == 1.0"),
    ("math.sign", "math.sign(-3) == -1"),
    ("math.sqrt", "math.sqrt(4) == 2.0"),
    ("math.isNaN", "!math.isNaN(1.0)"),
    ("math.isInf", "!math.isInf(1.0)"),
    ("math.isFinite", "math.isFinite(1.0)"),
    ("math.bitAnd", "math.bitAnd(3, 1) == 1"),
    ("math.bitOr", "math.bitOr(2, 1) == 3"),
    ("math.bitXor", "math.bitXor(3, 1) == 2"),
    ("math.bitNot", "math.bitNot(0) == -1"),
    ("math.bitShiftLeft", "math.bitShiftLeft(1, 2) == 4"),
    ("math.bitShiftRight", "math.bitShiftRight(4, 2) == 1"),
    ("isSorted", "[1, 2, 2].isSorted() && ![2, 1].isSorted()"),
    ("sum", "[1, 2, 3].sum() == 6 && [].sum() == 0"),
    ("min", "[3, 1, 2].min() == 1"),
    ("max", "[3, 1, 2].max() == 3"),
    (
        "find",
        "'abc123'.find('[0-9]+') == '123' && 'abc'.find('[0-9]') == ''",
    ),
    (
        "findAll",
        "'a1b22'.findAll('[0-9]+') == ['1', '22'] && 'a1b2'.findAll('[0-9]', 1) == ['1']",
    ),
];

/// The identifiers a rule may name besides its variables: type names.
const TYPE_NAMES: &[&str] = &[
    "bool",
    "bytes",
    "double",
    "int",
    "list",
    "map",
    "null_type",
    "string",
    "type",
    "uint",
];

/// The environment every rule is compiled and evaluated in, built once.
static ENV: LazyLock<Arc<Env>> = LazyLock::new(|| {
    let mut env = Env::stdlib();
    env.add_extension(cel::extensions::strings)
        .and_then(|()| env.add_extension(cel::extensions::lists))
        .and_then(|()| env.add_extension(cel::extensions::math))
        .and_then(|()| kubernetes(&mut env))
        .expect("the CEL environment's overloads are distinct");
    Arc::new(env)
});

/// Kubernetes' list and regex libraries (`k8s.io/apiserver/pkg/cel/library`).
fn kubernetes(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_member_overload("isSorted", "list.isSorted()", LIST_TYPE, vec![], is_sorted)?;
    env.add_member_overload("sum", "list.sum()", LIST_TYPE, vec![], sum)?;
    env.add_member_overload("min", "list.min()", LIST_TYPE, vec![], min)?;
    env.add_member_overload("max", "list.max()", LIST_TYPE, vec![], max)?;
    env.add_member_overload(
        "indexOf",
        "list.indexOf(dyn)",
        LIST_TYPE,
        vec![DYN_TYPE],
        index_of,
    )?;
    env.add_member_overload(
        "lastIndexOf",
        "list.lastIndexOf(dyn)",
        LIST_TYPE,
        vec![DYN_TYPE],
        last_index_of,
    )?;
    env.add_member_overload(
        "find",
        "string.find(string)",
        STRING_TYPE,
        vec![STRING_TYPE],
        find,
    )?;
    env.add_member_overload(
        "findAll",
        "string.findAll(string)",
        STRING_TYPE,
        vec![STRING_TYPE],
        find_all,
    )?;
    env.add_member_overload(
        "findAll",
        "string.findAll(string,int)",
        STRING_TYPE,
        vec![STRING_TYPE, INT_TYPE],
        find_all,
    )
}

type Args<'b, 'v> = Vec<CowVal<'b, 'v>>;
type Out<'b, 'v> = Result<CowVal<'b, 'v>, ExecutionError>;

/// The elements of the list an overload was called on.
fn elements<'b, 'v>(
    args: &'b Args<'_, 'v>,
    function: &str,
) -> Result<Vec<&'b (dyn Val + 'v)>, ExecutionError> {
    let list = args
        .first()
        .and_then(|l| l.as_ref().as_iterable())
        .ok_or_else(|| {
            ExecutionError::function_error(function, "called on something not a list")
        })?;
    let mut items = list.iter();
    let mut out = Vec::new();
    while let Some(item) = items.next() {
        out.push(item);
    }
    Ok(out)
}

fn compare(a: &dyn Val, b: &dyn Val, function: &str) -> Result<std::cmp::Ordering, ExecutionError> {
    a.as_comparer()
        .ok_or_else(|| {
            ExecutionError::function_error(function, "list elements must be comparable")
        })?
        .compare(b)
}

fn is_sorted<'b, 'v>(args: Args<'b, 'v>) -> Out<'b, 'v> {
    let items = elements(&args, "isSorted")?;
    for pair in items.windows(2) {
        if compare(pair[0], pair[1], "isSorted")? == std::cmp::Ordering::Greater {
            return Ok(CowVal::owned(cel::common::types::CelBool::from(false)));
        }
    }
    Ok(CowVal::owned(cel::common::types::CelBool::from(true)))
}

fn sum<'b, 'v>(args: Args<'b, 'v>) -> Out<'b, 'v> {
    let items = elements(&args, "sum")?;
    let Some((first, rest)) = items.split_first() else {
        return Ok(CowVal::owned(CelInt::from(0)));
    };
    let mut total: Box<dyn Val + 'v> = first.clone_as_boxed();
    for item in rest {
        let next = total
            .as_adder()
            .ok_or_else(|| ExecutionError::function_error("sum", "list elements must be numbers"))?
            .add(*item)?
            .into_owned();
        total = next;
    }
    Ok(CowVal::Owned(total))
}

fn extreme<'b, 'v>(args: Args<'b, 'v>, function: &str, keep: std::cmp::Ordering) -> Out<'b, 'v> {
    let items = elements(&args, function)?;
    let mut best = *items
        .first()
        .ok_or_else(|| ExecutionError::function_error(function, "list must not be empty"))?;
    for item in &items[1..] {
        if compare(*item, best, function)? == keep {
            best = *item;
        }
    }
    Ok(CowVal::Owned(best.clone_as_boxed()))
}

fn min<'b, 'v>(args: Args<'b, 'v>) -> Out<'b, 'v> {
    extreme(args, "min", std::cmp::Ordering::Less)
}

fn max<'b, 'v>(args: Args<'b, 'v>) -> Out<'b, 'v> {
    extreme(args, "max", std::cmp::Ordering::Greater)
}

fn position<'b, 'v>(args: Args<'b, 'v>, function: &str, last: bool) -> Out<'b, 'v> {
    let items = elements(&args, function)?;
    let wanted = args
        .get(1)
        .ok_or_else(ExecutionError::missing_argument_or_target)?
        .as_ref();
    let mut found = items.iter().enumerate().filter(|(_, v)| v.equals(wanted));
    let at = if last { found.last() } else { found.next() };
    Ok(CowVal::owned(CelInt::from(
        at.map_or(-1, |(i, _)| i as i64),
    )))
}

fn index_of<'b, 'v>(args: Args<'b, 'v>) -> Out<'b, 'v> {
    position(args, "indexOf", false)
}

fn last_index_of<'b, 'v>(args: Args<'b, 'v>) -> Out<'b, 'v> {
    position(args, "lastIndexOf", true)
}

/// The string an overload was called on, and its pattern.
fn text_and_pattern(
    args: &Args<'_, '_>,
    function: &str,
) -> Result<(String, regex::Regex), ExecutionError> {
    let string = |i: usize| {
        args.get(i)
            .and_then(|v| v.as_ref().downcast_ref::<CelString>())
            .map(|s| s.inner().to_string())
            .ok_or_else(|| ExecutionError::function_error(function, "expects strings"))
    };
    let pattern =
        regex::Regex::new(&string(1)?).map_err(|e| ExecutionError::function_error(function, e))?;
    Ok((string(0)?, pattern))
}

fn find<'b, 'v>(args: Args<'b, 'v>) -> Out<'b, 'v> {
    let (text, pattern) = text_and_pattern(&args, "find")?;
    let found = pattern.find(&text).map_or("", |m| m.as_str()).to_string();
    Ok(CowVal::owned(CelString::from(found)))
}

fn find_all<'b, 'v>(args: Args<'b, 'v>) -> Out<'b, 'v> {
    let (text, pattern) = text_and_pattern(&args, "findAll")?;
    let limit = args
        .get(2)
        .and_then(|v| v.as_ref().downcast_ref::<CelInt>())
        .map_or(-1, |n| *n.inner());
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    let found: Vec<Box<dyn Val + 'v>> = pattern
        .find_iter(&text)
        .take(limit)
        .map(|m| Box::new(CelString::from(m.as_str().to_string())) as Box<dyn Val>)
        .collect();
    Ok(CowVal::owned(CelList::from(found)))
}

/// The rules of one schema, in a tree that holds only the nodes on the way to a rule.
pub struct Rules {
    root: Node,
}

#[derive(Default)]
struct Node {
    /// The node's schema, for turning values into CEL values (only where there are rules).
    schema: Value,
    rules: Vec<Rule>,
    properties: Vec<(String, Node)>,
    items: Option<Box<Node>>,
    additional: Option<Box<Node>>,
    /// The keys of an `x-kubernetes-list-type: map` list, by which old items are found.
    map_keys: Option<Vec<String>>,
    /// The only fields of the node's value its rules read (`self.a`, `has(self.b)`), when
    /// they read nothing else of it: the value handed to CEL then holds just those.
    reads: Option<Vec<String>>,
}

struct Rule {
    source: String,
    program: Program,
    message: Option<String>,
    message_expression: Option<Program>,
    reason: Option<String>,
    field_path: Option<String>,
    transition: bool,
    optional_old_self: bool,
}

impl Rules {
    /// Compiles the rules of `schema`, the `openAPIV3Schema` of a version, found at `at` in
    /// its definition; each rule berth cannot evaluate is a cause. `None` when the schema
    /// has no rules.
    pub fn compile(schema: &Value, at: &str, causes: &mut Vec<Cause>) -> Option<Rules> {
        let root = compile_node(schema, at, true, causes)?;
        Some(Rules { root })
    }

    /// Checks `new` (and, for an update, `old`), adding a cause for each rule that fails.
    pub fn check(&self, new: &Value, old: Option<&Value>, causes: &mut Vec<Cause>) {
        self.root.check("", new, old, true, causes);
    }
}

fn compile_node(
    schema: &Value,
    at: &str,
    correlatable: bool,
    causes: &mut Vec<Cause>,
) -> Option<Node> {
    let m = schema.as_object()?;
    let mut node = Node::default();
    for (i, rule) in m
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let at = format!("{at}.x-kubernetes-validations[{i}]");
        if let Some(rule) = compile_rule(rule, schema, &at, correlatable, causes) {
            node.rules.push(rule);
        }
    }
    if let Some(Value::Object(props)) = m.get("properties") {
        for (name, sub) in props {
            if let Some(child) = compile_node(
                sub,
                &format!("{at}.properties[{name}]"),
                correlatable,
                causes,
            ) {
                node.properties.push((name.clone(), child));
            }
        }
    }
    let map_list = m.get("x-kubernetes-list-type").and_then(Value::as_str) == Some("map");
    if let Some(items) = m.get("items") {
        node.items = compile_node(
            items,
            &format!("{at}.items"),
            correlatable && map_list,
            causes,
        )
        .map(Box::new);
        if map_list {
            node.map_keys = Some(
                m.get("x-kubernetes-list-map-keys")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect(),
            );
        }
    }
    if let Some(additional @ Value::Object(_)) = m.get("additionalProperties") {
        node.additional = compile_node(
            additional,
            &format!("{at}.additionalProperties"),
            correlatable,
            causes,
        )
        .map(Box::new);
    }
    if node.rules.is_empty()
        && node.properties.is_empty()
        && node.items.is_none()
        && node.additional.is_none()
    {
        return None;
    }
    if !node.rules.is_empty() {
        node.schema = schema.clone();
        let mut reads = Some(std::collections::BTreeSet::new());
        for rule in &node.rules {
            fields_read(rule.program.expression(), &mut reads);
            if let Some(m) = &rule.message_expression {
                fields_read(m.expression(), &mut reads);
            }
        }
        node.reads = reads.map(|r| r.into_iter().collect());
    }
    Some(node)
}

fn compile_rule(
    rule: &Value,
    schema: &Value,
    at: &str,
    correlatable: bool,
    causes: &mut Vec<Cause>,
) -> Option<Rule> {
    let text = |f: &str| rule.get(f).and_then(Value::as_str).map(str::trim);
    let source = text("rule").unwrap_or("");
    if source.is_empty() {
        causes.push(Cause::required(&format!("{at}.rule")));
        return None;
    }
    let before = causes.len();
    let program = compile(source, &format!("{at}.rule"), causes);
    if let Some(p) = &program {
        let cost = estimated_cost(p.expression(), schema, &mut Vec::new());
        if cost > COST_LIMIT {
            causes.push(Cause::forbidden(
                &format!("{at}.rule"),
                &format!(
                    "estimated rule cost exceeds budget by factor of {:.1}x (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)",
                    cost as f64 / COST_LIMIT as f64
                ),
            ));
        }
    }
    let transition = program
        .as_ref()
        .is_some_and(|p| p.references().has_variable("oldSelf"));
    if transition && !correlatable {
        causes.push(Cause::invalid(
            &format!("{at}.rule"),
            &json!(source),
            "oldSelf cannot be used on the uncorrelatable portion of the schema (the items of a list that is not x-kubernetes-list-type: map)",
        ));
    }
    let message = text("message").map(str::to_string);
    if let Some(message) = &message {
        if message.is_empty() {
            causes.push(Cause::required(&format!("{at}.message")));
        } else if message.contains('\n') {
            causes.push(Cause::invalid(
                &format!("{at}.message"),
                &json!(message),
                "message must not contain line breaks",
            ));
        }
    }
    let message_expression = match text("messageExpression") {
        None => None,
        Some("") => {
            causes.push(Cause::required(&format!("{at}.messageExpression")));
            None
        }
        Some(expr) => compile(expr, &format!("{at}.messageExpression"), causes),
    };
    let reason = text("reason").map(str::to_string);
    if let Some(reason) = &reason {
        const REASONS: [&str; 4] = [
            "FieldValueDuplicate",
            "FieldValueForbidden",
            "FieldValueInvalid",
            "FieldValueRequired",
        ];
        if !REASONS.contains(&reason.as_str()) {
            causes.push(Cause::not_supported(
                &format!("{at}.reason"),
                reason,
                &REASONS,
            ));
        }
    }
    let field_path = match text("fieldPath") {
        None => None,
        Some(path) => match relative_path(path, schema) {
            Ok(p) => Some(p),
            Err(e) => {
                causes.push(Cause::invalid(&format!("{at}.fieldPath"), &json!(path), &e));
                None
            }
        },
    };
    let optional_old_self = rule.get("optionalOldSelf") == Some(&Value::Bool(true));
    if optional_old_self && !transition {
        causes.push(Cause::invalid(
            &format!("{at}.optionalOldSelf"),
            &json!(true),
            "may not be set if rule does not use oldSelf",
        ));
    }
    if causes.len() > before {
        return None;
    }
    Some(Rule {
        source: source.to_string(),
        program: program?,
        message,
        message_expression,
        reason,
        field_path,
        transition,
        optional_old_self,
    })
}

/// Compiles one expression, refusing what the environment cannot evaluate.
fn compile(source: &str, at: &str, causes: &mut Vec<Cause>) -> Option<Program> {
    let program = match ENV.compile(source) {
        Ok(p) => p,
        Err(e) => {
            causes.push(Cause::invalid(
                at,
                &json!(source),
                &format!("compilation failed: {e}"),
            ));
            return None;
        }
    };
    let mut unknown = Vec::new();
    let mut scope = vec!["self".to_string(), "oldSelf".to_string()];
    unresolved(program.expression(), &mut scope, &mut unknown);
    if unknown.is_empty() {
        return Some(program);
    }
    unknown.sort();
    unknown.dedup();
    causes.push(Cause::invalid(
        at,
        &json!(source),
        &format!(
            "compilation failed: ERROR: <input>: undeclared reference to {}: berth evaluates CEL's standard library with the strings, lists and math extensions and Kubernetes' list and regex functions; write the rule with those",
            unknown.iter().map(|u| format!("'{u}'")).collect::<Vec<_>>().join(", ")
        ),
    ));
    None
}

fn known_function(name: &str) -> bool {
    FUNCTIONS.iter().any(|(f, _)| *f == name)
}

/// Collects the functions and variables `expr` names that the environment does not have.
fn unresolved(expr: &IdedExpr, scope: &mut Vec<String>, unknown: &mut Vec<String>) {
    match &expr.expr {
        Expr::Unspecified | Expr::Literal(_) => {}
        Expr::Ident(name) => {
            if !scope.contains(name) && !TYPE_NAMES.contains(&name.as_str()) {
                unknown.push(name.clone());
            }
        }
        Expr::Select(select) => unresolved(&select.operand, scope, unknown),
        Expr::Call(call) => {
            // `math.abs(x)` is a call of `abs` on the identifier `math`, unless `math` is
            // a variable.
            let namespaced = match call.target.as_deref().map(|t| &t.expr) {
                Some(Expr::Ident(ns)) if !scope.contains(ns) => {
                    Some(format!("{ns}.{}", call.func_name))
                }
                _ => None,
            };
            match namespaced {
                Some(name) if known_function(&name) => {}
                _ => {
                    if !known_function(&call.func_name) {
                        unknown.push(call.func_name.clone());
                    }
                    if let Some(target) = &call.target {
                        unresolved(target, scope, unknown);
                    }
                }
            }
            for arg in &call.args {
                unresolved(arg, scope, unknown);
            }
        }
        Expr::List(list) => list
            .elements
            .iter()
            .for_each(|e| unresolved(e, scope, unknown)),
        Expr::Map(map) => {
            for entry in &map.entries {
                match &entry.expr {
                    EntryExpr::StructField(f) => unresolved(&f.value, scope, unknown),
                    EntryExpr::MapEntry(e) => {
                        unresolved(&e.key, scope, unknown);
                        unresolved(&e.value, scope, unknown);
                    }
                }
            }
        }
        Expr::Struct(s) => unknown.push(s.type_name.clone()),
        Expr::Comprehension(c) => {
            unresolved(&c.iter_range, scope, unknown);
            unresolved(&c.accu_init, scope, unknown);
            let depth = scope.len();
            scope.push(c.iter_var.clone());
            scope.extend(c.iter_var2.clone());
            scope.push(c.accu_var.clone());
            for e in [&c.loop_cond, &c.loop_step, &c.result] {
                unresolved(e, scope, unknown);
            }
            scope.truncate(depth);
        }
    }
}

/// The most a rule may be estimated to cost, in kube-apiserver's units (about one per
/// value visited): its `StaticEstimatedCostLimit`.
const COST_LIMIT: u64 = 10_000_000;

/// How many elements a list or map without `maxItems`/`maxProperties` may have: as many
/// as the smallest elements (an empty string and a comma: three bytes) that fit in the
/// largest request, 3 MiB.
const UNBOUNDED: u64 = 3 * 1024 * 1024 / 3;

/// The schema `expr` reads, when it is `self` or a field path from it (or from a
/// comprehension variable bound to one).
fn schema_of<'s>(
    expr: &IdedExpr,
    schema: &'s Value,
    bound: &[(String, &'s Value)],
) -> Option<&'s Value> {
    match &expr.expr {
        Expr::Ident(name) if name == "self" || name == "oldSelf" => Some(schema),
        Expr::Ident(name) => bound.iter().rev().find(|(n, _)| n == name).map(|(_, s)| *s),
        Expr::Select(select) if !select.test => {
            let parent = schema_of(&select.operand, schema, bound)?;
            parent
                .get("properties")
                .and_then(|p| p.get(&select.field))
                .or_else(|| parent.get("additionalProperties").filter(|a| a.is_object()))
        }
        _ => None,
    }
}

/// An upper bound of what evaluating `expr` costs: each comprehension runs its body once
/// per element of its range, whose size comes from the schema's `maxItems` or
/// `maxProperties`, or is [`UNBOUNDED`]. Rules beyond [`COST_LIMIT`] are refused, so no
/// object can make a write evaluate for long.
fn estimated_cost<'s>(
    expr: &IdedExpr,
    schema: &'s Value,
    bound: &mut Vec<(String, &'s Value)>,
) -> u64 {
    match &expr.expr {
        Expr::Unspecified | Expr::Literal(_) => 0,
        Expr::Ident(_) => 1,
        Expr::Select(select) => estimated_cost(&select.operand, schema, bound).saturating_add(1),
        Expr::Call(call) => {
            // Logical operators only pick between values already computed.
            let logical = ["_&&_", "_||_", "!_", "_?_:_", "@not_strictly_false"];
            let mut cost = u64::from(!logical.contains(&call.func_name.as_str()));
            for e in call.target.iter().map(|t| &**t).chain(&call.args) {
                cost = cost.saturating_add(estimated_cost(e, schema, bound));
            }
            cost
        }
        Expr::List(list) => list.elements.iter().fold(1, |c: u64, e| {
            c.saturating_add(estimated_cost(e, schema, bound))
        }),
        Expr::Map(map) => map
            .entries
            .iter()
            .fold(1, |c: u64, entry| match &entry.expr {
                EntryExpr::StructField(f) => {
                    c.saturating_add(estimated_cost(&f.value, schema, bound))
                }
                EntryExpr::MapEntry(e) => c
                    .saturating_add(estimated_cost(&e.key, schema, bound))
                    .saturating_add(estimated_cost(&e.value, schema, bound)),
            }),
        Expr::Struct(_) => 1,
        Expr::Comprehension(c) => {
            let range = schema_of(&c.iter_range, schema, bound);
            let size = range
                .and_then(|r| r.get("maxItems").or_else(|| r.get("maxProperties")))
                .and_then(Value::as_u64)
                .unwrap_or(UNBOUNDED);
            let element =
                range.and_then(|r| r.get("items").or_else(|| r.get("additionalProperties")));
            let depth = bound.len();
            if let Some(element) = element.filter(|e| e.is_object()) {
                bound.push((c.iter_var.clone(), element));
            }
            let body = estimated_cost(&c.loop_cond, schema, bound).saturating_add(estimated_cost(
                &c.loop_step,
                schema,
                bound,
            ));
            bound.truncate(depth);
            estimated_cost(&c.iter_range, schema, bound)
                .saturating_add(estimated_cost(&c.accu_init, schema, bound))
                .saturating_add(size.saturating_mul(body))
                .saturating_add(estimated_cost(&c.result, schema, bound))
        }
    }
}

/// A rule's `fieldPath` (`.spec.replicas`, `.labels['a.b']`) as a path relative to the
/// rule's node, checked against the schema as kube-apiserver does.
fn relative_path(path: &str, schema: &Value) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = path;
    let mut schema = schema;
    while !rest.is_empty() {
        let (name, named, tail) = if let Some(r) = rest.strip_prefix("['") {
            let end = r.find("']").ok_or("must be a valid path: expected ']'")?;
            (&r[..end], false, &r[end + 2..])
        } else if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            (&r[..end], true, &r[end..])
        } else {
            return Err(format!(
                "must be a valid path: expected [ or . but got: {rest}"
            ));
        };
        if name.is_empty() {
            return Err("must be a valid path: unexpected end of JSON path".into());
        }
        if let Some(sub) = schema.get("properties").and_then(|p| p.get(name)) {
            schema = sub;
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(name);
        } else if let Some(sub) = schema.get("additionalProperties").filter(|a| a.is_object()) {
            schema = sub;
            out.push_str(&format!("[{name}]"));
        } else {
            return Err("must be a valid path: does not refer to a valid field".into());
        }
        let _ = named;
        rest = tail;
    }
    Ok(out)
}

fn join(at: &str, field: &str) -> String {
    match (at.is_empty(), field.starts_with('[')) {
        (true, _) | (false, true) => format!("{at}{field}"),
        (false, false) => format!("{at}.{field}"),
    }
}

impl Node {
    fn check(
        &self,
        at: &str,
        new: &Value,
        old: Option<&Value>,
        root: bool,
        causes: &mut Vec<Cause>,
    ) {
        if old == Some(new) {
            return;
        }
        if !self.rules.is_empty() {
            let reads = self.reads.as_deref();
            let value = to_cel_fields(new, &self.schema, root, reads);
            let old_value = old.map(|o| to_cel_fields(o, &self.schema, root, reads));
            // One binding of the variables serves every rule of the node but those that
            // take oldSelf as an optional.
            let mut plain = Context::with_env(ENV.clone());
            plain.add_variable_from_value("self", value.clone());
            if let Some(o) = &old_value {
                plain.add_variable_from_value("oldSelf", o.clone());
            }
            let mut optional: Option<Context> = None;
            for rule in &self.rules {
                let ctx = if rule.optional_old_self {
                    optional.get_or_insert_with(|| {
                        let mut ctx = Context::with_env(ENV.clone());
                        ctx.add_variable_from_value("self", value.clone());
                        let inner: Option<Box<dyn Val>> =
                            old_value.as_ref().map(|o| to_val(o.clone()));
                        ctx.add_variable_as_val("oldSelf", Box::new(CelOptional::from(inner)));
                        ctx
                    })
                } else if rule.transition && old.is_none() {
                    continue;
                } else {
                    &plain
                };
                rule.check(at, new, &self.schema, ctx, causes);
            }
        }
        let Some(obj) = new.as_object() else {
            if let (Some(items), Some(list)) = (&self.items, new.as_array()) {
                let old_list = old.and_then(Value::as_array);
                for (i, v) in list.iter().enumerate() {
                    let before = self
                        .map_keys
                        .as_ref()
                        .zip(old_list)
                        .and_then(|(keys, old)| {
                            old.iter()
                                .find(|o| keys.iter().all(|k| o.get(k) == v.get(k)))
                        });
                    items.check(&format!("{at}[{i}]"), v, before, false, causes);
                }
            }
            return;
        };
        let old_obj = old.and_then(Value::as_object);
        for (name, child) in &self.properties {
            if let Some(v) = obj.get(name) {
                let before = old_obj.and_then(|o| o.get(name));
                child.check(&join(at, name), v, before, false, causes);
            }
        }
        if let Some(additional) = &self.additional {
            for (key, v) in obj {
                let before = old_obj.and_then(|o| o.get(key));
                additional.check(&format!("{at}[{key}]"), v, before, false, causes);
            }
        }
    }
}

impl Rule {
    fn check(&self, at: &str, new: &Value, schema: &Value, ctx: &Context, causes: &mut Vec<Cause>) {
        let ty = schema.get("type").and_then(Value::as_str).unwrap_or("");
        let failed = match self.program.execute(ctx) {
            Ok(CelValue::Bool(true)) => return,
            Ok(CelValue::Bool(false)) => true,
            Ok(other) => {
                causes.push(Cause::invalid(
                    at,
                    &json!(ty),
                    &format!(
                        "rule evaluated to {:?}, not a bool: {}",
                        other.type_of(),
                        self.error_string()
                    ),
                ));
                false
            }
            Err(e) => {
                causes.push(Cause::invalid(
                    at,
                    &json!(ty),
                    &format!("{e} evaluating rule: {}", self.error_string()),
                ));
                false
            }
        };
        if !failed {
            return;
        }
        let field = match &self.field_path {
            Some(p) => join(at, p),
            None => at.to_string(),
        };
        let detail = self
            .message_expression
            .as_ref()
            .and_then(|expr| match expr.execute(ctx) {
                Ok(CelValue::String(s)) => {
                    let s = s.trim();
                    (!s.is_empty() && !s.contains('\n')).then(|| s.to_string())
                }
                _ => None,
            })
            .unwrap_or_else(|| match &self.message {
                Some(m) => m.clone(),
                None => format!("failed rule: {}", self.source),
            });
        let cause = match self.reason.as_deref() {
            Some("FieldValueForbidden") => Cause::forbidden(&field, &detail),
            Some("FieldValueRequired") => Cause {
                reason: "FieldValueRequired".into(),
                message: format!("Required value: {detail}"),
                field,
            },
            Some("FieldValueDuplicate") => Cause {
                reason: "FieldValueDuplicate".into(),
                message: format!("Duplicate value: {}", shown(new, ty)),
                field,
            },
            _ => Cause {
                reason: "FieldValueInvalid".into(),
                message: match ty {
                    "object" | "array" => format!("Invalid value: {detail}"),
                    _ => format!("Invalid value: {new}: {detail}"),
                },
                field,
            },
        };
        causes.push(cause);
    }

    fn error_string(&self) -> &str {
        self.message.as_deref().unwrap_or(&self.source)
    }
}

fn shown(v: &Value, ty: &str) -> String {
    match ty {
        "object" | "array" => format!("{ty:?}"),
        _ => v.to_string(),
    }
}

fn to_val(v: CelValue) -> Box<dyn Val> {
    v.try_into().expect("every CEL value is a Val")
}

/// `v` as a CEL value, typed by its schema: `number`s are doubles even when written
/// without a fraction; unknown fields keep JSON's own types.
/// Notes in `reads` the fields of `self` and `oldSelf` that `expr` selects; `None` once it
/// uses either as a whole.
fn fields_read(expr: &IdedExpr, reads: &mut Option<std::collections::BTreeSet<String>>) {
    let is_var = |e: &IdedExpr| matches!(&e.expr, Expr::Ident(n) if n == "self" || n == "oldSelf");
    match &expr.expr {
        Expr::Ident(_) if is_var(expr) => *reads = None,
        Expr::Unspecified | Expr::Literal(_) | Expr::Ident(_) | Expr::Struct(_) => {}
        Expr::Select(select) if is_var(&select.operand) => {
            if let Some(r) = reads {
                r.insert(select.field.clone());
            }
        }
        Expr::Select(select) => fields_read(&select.operand, reads),
        Expr::Call(call) => {
            for e in call.target.iter().map(|t| &**t).chain(&call.args) {
                fields_read(e, reads);
            }
        }
        Expr::List(list) => list.elements.iter().for_each(|e| fields_read(e, reads)),
        Expr::Map(map) => {
            for entry in &map.entries {
                match &entry.expr {
                    EntryExpr::StructField(f) => fields_read(&f.value, reads),
                    EntryExpr::MapEntry(e) => {
                        fields_read(&e.key, reads);
                        fields_read(&e.value, reads);
                    }
                }
            }
        }
        Expr::Comprehension(c) => {
            for e in [
                &c.iter_range,
                &c.accu_init,
                &c.loop_cond,
                &c.loop_step,
                &c.result,
            ] {
                fields_read(e, reads);
            }
        }
    }
}

/// [`to_cel`] of an object holding only the fields `reads` names (all when `None`).
fn to_cel_fields(v: &Value, schema: &Value, root: bool, reads: Option<&[String]>) -> CelValue {
    match (reads, v) {
        (Some(fields), Value::Object(m)) => object_to_cel(
            fields.iter().filter_map(|f| m.get_key_value(f)),
            schema,
            root,
        ),
        _ => to_cel(v, schema, root),
    }
}

fn to_cel(v: &Value, schema: &Value, root: bool) -> CelValue {
    match v {
        Value::Null => CelValue::Null,
        Value::Bool(b) => CelValue::Bool(*b),
        Value::Number(n) => {
            let number = schema.get("type").and_then(Value::as_str) == Some("number");
            match (number, n.as_i64(), n.as_u64()) {
                (false, Some(i), _) => CelValue::Int(i),
                (false, None, Some(u)) => CelValue::UInt(u),
                _ => CelValue::Float(n.as_f64().unwrap_or(f64::NAN)),
            }
        }
        Value::String(s) => CelValue::String(Arc::new(s.clone())),
        Value::Array(items) => {
            let item = schema.get("items").unwrap_or(&Value::Null);
            CelValue::List(Arc::new(
                items.iter().map(|i| to_cel(i, item, false)).collect(),
            ))
        }
        Value::Object(m) => object_to_cel(m.iter(), schema, root),
    }
}

/// An object of `members` as a CEL map, each typed by `schema`.
fn object_to_cel<'a>(
    members: impl Iterator<Item = (&'a String, &'a Value)>,
    schema: &Value,
    root: bool,
) -> CelValue {
    let mut map = HashMap::new();
    for (k, v) in members {
        let sub = schema
            .get("properties")
            .and_then(|p| p.get(k))
            .or_else(|| schema.get("additionalProperties").filter(|a| a.is_object()))
            .unwrap_or(&Value::Null);
        let value = if root && k == "metadata" {
            // At the root a rule sees only the names of the metadata.
            let kept = ["name", "generateName"]
                .into_iter()
                .filter_map(|f| {
                    v.get(f)
                        .map(|x| (Key::from(f.to_string()), to_cel(x, &Value::Null, false)))
                })
                .collect();
            CelValue::Map(CelMap {
                map: Arc::new(kept),
            })
        } else {
            to_cel(v, sub, false)
        };
        map.insert(Key::from(k.clone()), value);
    }
    CelValue::Map(CelMap { map: Arc::new(map) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn evaluate(source: &str) -> Result<CelValue, ExecutionError> {
        let program = ENV.compile(source).expect(source);
        program.execute(&Context::with_env(ENV.clone()))
    }

    #[test]
    fn every_function_offered_evaluates() {
        for (name, sample) in FUNCTIONS {
            let program = ENV
                .compile(sample)
                .unwrap_or_else(|e| panic!("{sample}: {e}"));
            assert!(
                program.references().has_function(name)
                    || sample.contains(&format!("{}(", name.rsplit('.').next().unwrap())),
                "{sample} does not call {name}"
            );
            assert_eq!(
                evaluate(sample),
                Ok(CelValue::Bool(true)),
                "{name}: {sample}"
            );
            let mut unknown = Vec::new();
            unresolved(program.expression(), &mut vec![], &mut unknown);
            assert!(unknown.is_empty(), "{sample}: {unknown:?}");
        }
    }

    fn rules(schema: Value) -> Result<Rules, Vec<Cause>> {
        let mut causes = Vec::new();
        match Rules::compile(&schema, "s", &mut causes) {
            Some(r) if causes.is_empty() => Ok(r),
            _ => Err(causes),
        }
    }

    fn check(rules: &Rules, new: Value, old: Option<Value>) -> Vec<String> {
        let mut causes = Vec::new();
        rules.check(&new, old.as_ref(), &mut causes);
        causes
            .into_iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    fn spec(rule: Value) -> Value {
        json!({"type": "object", "properties": {"spec": {
            "type": "object",
            "properties": {
                "min": {"type": "integer"},
                "max": {"type": "integer"},
                "ratio": {"type": "number"},
                "name": {"type": "string"},
                "ports": {"type": "array", "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["port"],
                    "items": {"type": "object", "properties": {"port": {"type": "integer"}, "name": {"type": "string"}},
                        "x-kubernetes-validations": [{"rule": "!has(oldSelf.name) || self.name == oldSelf.name", "message": "name is immutable"}]}},
                "tags": {"type": "array", "items": {"type": "string"}},
            },
            "x-kubernetes-validations": [rule],
        }}})
    }

    #[test]
    fn rules_fail_with_their_message_on_the_field_they_are_declared_on() {
        let r = rules(spec(
            json!({"rule": "self.min <= self.max", "message": "min must not exceed max"}),
        ))
        .unwrap();
        assert!(check(&r, json!({"spec": {"min": 1, "max": 2}}), None).is_empty());
        assert_eq!(
            check(&r, json!({"spec": {"min": 3, "max": 2}}), None),
            ["spec: Invalid value: min must not exceed max"]
        );
        // A field left out is an evaluation error, as in kube-apiserver.
        let errs = check(&r, json!({"spec": {"min": 3}}), None);
        assert!(
            errs[0].starts_with("spec: Invalid value: \"object\": "),
            "{errs:?}"
        );
        assert!(
            errs[0].contains("evaluating rule: min must not exceed max"),
            "{errs:?}"
        );
    }

    #[test]
    fn numbers_are_doubles_and_message_expressions_reason_and_field_path_shape_the_error() {
        let r = rules(spec(json!({
            "rule": "self.ratio < 1.0",
            "messageExpression": "'ratio ' + string(self.ratio) + ' is too big'",
            "reason": "FieldValueForbidden",
            "fieldPath": ".ratio",
        })))
        .unwrap();
        assert!(check(&r, json!({"spec": {"ratio": 0}}), None).is_empty());
        assert_eq!(
            check(&r, json!({"spec": {"ratio": 2}}), None),
            ["spec.ratio: Forbidden: ratio 2 is too big"]
        );
    }

    #[test]
    fn transition_rules_run_on_updates_of_correlated_values() {
        let r = rules(spec(
            json!({"rule": "self.name == oldSelf.name", "message": "name is immutable"}),
        ))
        .unwrap();
        assert!(check(&r, json!({"spec": {"name": "a"}}), None).is_empty());
        assert_eq!(
            check(
                &r,
                json!({"spec": {"name": "b"}}),
                Some(json!({"spec": {"name": "a"}}))
            ),
            ["spec: Invalid value: name is immutable"]
        );
        // Items of a map list are matched by their keys.
        let old =
            json!({"spec": {"name": "a", "ports": [{"port": 80, "name": "http"}, {"port": 81}]}});
        let new = json!({"spec": {"name": "a", "ports": [{"port": 81, "name": "x"}, {"port": 80, "name": "web"}]}});
        assert_eq!(
            check(&r, new, Some(old)),
            ["spec.ports[1]: Invalid value: name is immutable"]
        );
    }

    #[test]
    fn unchanged_values_are_not_checked_again() {
        let r = rules(spec(json!({"rule": "self.min <= self.max"}))).unwrap();
        let bad = json!({"spec": {"min": 3, "max": 2}});
        assert_eq!(
            check(&r, bad.clone(), None),
            ["spec: Invalid value: failed rule: self.min <= self.max"]
        );
        let mut relabelled = bad.clone();
        relabelled["metadata"] = json!({"labels": {"a": "b"}});
        assert!(check(&r, relabelled, Some(bad)).is_empty());
    }

    #[test]
    fn optional_old_self_sees_creates_too() {
        let r = rules(spec(json!({
            "rule": "oldSelf.hasValue() || self.name.startsWith('new-')",
            "optionalOldSelf": true,
        })))
        .unwrap();
        assert_eq!(check(&r, json!({"spec": {"name": "x"}}), None).len(), 1);
        assert!(check(&r, json!({"spec": {"name": "new-x"}}), None).is_empty());
        assert!(
            check(
                &r,
                json!({"spec": {"name": "x"}}),
                Some(json!({"spec": {"name": "y"}}))
            )
            .is_empty()
        );
    }

    #[test]
    fn a_node_hands_cel_only_the_fields_its_rules_read() {
        let r = rules(spec(
            json!({"rule": "has(self.min) && self.min <= self.max"}),
        ))
        .unwrap();
        let spec_node = &r.root.properties[0].1;
        assert_eq!(
            spec_node.reads.as_deref(),
            Some(&["max".to_string(), "min".to_string()][..])
        );
        let whole = rules(spec(json!({"rule": "self == oldSelf || size(self) > 0"}))).unwrap();
        assert!(whole.root.properties[0].1.reads.is_none());
        // Comprehension variables are no fields of self.
        let r = rules(spec(json!({"rule": "self.tags.all(t, t != 'x')"}))).unwrap();
        assert_eq!(
            r.root.properties[0].1.reads.as_deref(),
            Some(&["tags".to_string()][..])
        );
        assert_eq!(
            check(&r, json!({"spec": {"tags": ["x"], "min": 1}}), None).len(),
            1
        );
    }

    #[test]
    fn the_root_sees_only_the_names_of_its_metadata() {
        let schema = json!({"type": "object", "x-kubernetes-validations": [
            {"rule": "self.metadata.name.startsWith('a') && !has(self.metadata.labels)"}]});
        let r = rules(schema).unwrap();
        assert!(
            check(
                &r,
                json!({"metadata": {"name": "ab", "labels": {"x": "y"}}}),
                None
            )
            .is_empty()
        );
        assert_eq!(check(&r, json!({"metadata": {"name": "b"}}), None).len(), 1);
    }

    #[test]
    fn rules_berth_cannot_evaluate_are_refused_with_reasons() {
        let refused = |rule: Value| -> String {
            match rules(spec(rule)) {
                Ok(_) => panic!("accepted"),
                Err(causes) => causes
                    .iter()
                    .map(|c| format!("{}: {}", c.field, c.message))
                    .collect::<Vec<_>>()
                    .join("; "),
            }
        };
        let e = refused(json!({"rule": "self.min <"}));
        assert!(e.contains("x-kubernetes-validations[0].rule: Invalid value: \"self.min <\": compilation failed: ERROR"), "{e}");
        let e = refused(json!({"rule": "quantity(self.name).isGreaterThan(quantity('1'))"}));
        assert!(
            e.contains("undeclared reference to 'isGreaterThan', 'quantity'"),
            "{e}"
        );
        assert!(refused(json!({"rule": "other.x == 1"})).contains("'other'"));
        assert!(refused(json!({"rule": ""})).contains("rule: Required value"));
        assert!(
            refused(json!({"rule": "true", "reason": "Nope"}))
                .contains("Unsupported value: \"Nope\"")
        );
        assert!(
            refused(json!({"rule": "true", "fieldPath": ".nope"}))
                .contains("does not refer to a valid field")
        );
        assert!(
            refused(json!({"rule": "true", "optionalOldSelf": true})).contains("optionalOldSelf")
        );
        assert!(refused(json!({"rule": "true", "message": "a\nb"})).contains("line breaks"));
        // oldSelf under a list that cannot correlate its items.
        let schema = json!({"type": "object", "properties": {"l": {"type": "array",
            "items": {"type": "string", "x-kubernetes-validations": [{"rule": "self == oldSelf"}]}}}});
        let e = rules(schema).err().unwrap();
        assert!(e[0].message.contains("uncorrelatable"), "{e:?}");
        // A rule whose cost has no bound: nested loops over a list without maxItems.
        let e = refused(json!({"rule": "self.tags.all(a, self.tags.all(b, a == b))"}));
        assert!(
            e.contains("Forbidden: estimated rule cost exceeds budget"),
            "{e}"
        );
        let mut bounded = spec(json!({"rule": "self.tags.all(a, self.tags.all(b, a == b))"}));
        bounded["properties"]["spec"]["properties"]["tags"]["maxItems"] = json!(100);
        assert!(rules(bounded).is_ok());
        // Comprehension variables are in scope in their comprehension only.
        assert!(
            rules(spec(
                json!({"rule": "self.tags.all(t, t.size() < 5) && self.tags.exists(t, t == 'a')"})
            ))
            .is_ok()
        );
        assert!(refused(json!({"rule": "self.tags.all(t, true) && t == 'a'"})).contains("'t'"));
    }
}

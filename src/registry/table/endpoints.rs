//! The Table cells of Endpoints and EndpointSlices, as kubectl's printers make them: the
//! first three addresses (with their ports, for Endpoints) and how many more there are.

use serde_json::{Value, json};

use super::{Column, age, col, s};

fn name_and_age(v: &Value) -> (Value, Value) {
    (
        json!(s(v, "/metadata/name")),
        json!(age(v, "/metadata/creationTimestamp")),
    )
}

/// At most three items: `a,b,c + 2 more...` (`listWithMoreString`).
fn first_three(list: &[String], count: usize) -> String {
    let shown = list.iter().take(3).cloned().collect::<Vec<_>>().join(",");
    if count > 3 {
        format!("{shown} + {} more...", count - 3)
    } else {
        shown
    }
}

fn items(v: &Value) -> &[Value] {
    v.as_array().map_or(&[][..], Vec::as_slice)
}

pub(super) fn endpoints_columns() -> Vec<Column> {
    vec![
        col("Name", 0, "Name must be unique within a namespace."),
        col(
            "Endpoints",
            0,
            "The set of all endpoints is the union of all subsets.",
        ),
        col("Age", 0, "The time since the object was created."),
    ]
}

/// `formatEndpoints`: `ip:port` for every ready address and port (an address alone for
/// a subset without ports), `<none>` without subsets.
fn format_endpoints(v: &Value) -> String {
    let subsets = items(&v["subsets"]);
    if subsets.is_empty() {
        return "<none>".into();
    }
    let mut list = Vec::new();
    let mut count = 0;
    for ss in subsets {
        let addresses = items(&ss["addresses"]);
        let ip = |a: &Value| a["ip"].as_str().unwrap_or("").to_string();
        let ports = items(&ss["ports"]);
        if ports.is_empty() {
            count += addresses.len();
            list.extend(addresses.iter().map(ip));
            continue;
        }
        for p in ports {
            count += addresses.len();
            let port = p["port"].as_i64().unwrap_or(0);
            list.extend(addresses.iter().map(|a| {
                let ip = ip(a);
                if ip.contains(':') {
                    format!("[{ip}]:{port}")
                } else {
                    format!("{ip}:{port}")
                }
            }));
        }
    }
    first_three(&list, count)
}

pub(super) fn endpoints_cells(v: &Value) -> Vec<Value> {
    let (name, age) = name_and_age(v);
    vec![name, json!(format_endpoints(v)), age]
}

pub(super) fn slice_columns() -> Vec<Column> {
    vec![
        col("Name", 0, "Name must be unique within a namespace."),
        col(
            "AddressType",
            0,
            "addressType specifies the type of address carried by this EndpointSlice.",
        ),
        col(
            "Ports",
            0,
            "ports specifies the list of network ports exposed by each endpoint in this slice.",
        ),
        col(
            "Endpoints",
            0,
            "endpoints is a list of unique endpoints in this slice.",
        ),
        col("Age", 0, "The time since the object was created."),
    ]
}

/// `formatDiscoveryPorts` and `formatDiscoveryEndpoints`: `<unset>` when empty.
fn or_unset(list: &[String], count: usize) -> String {
    let out = first_three(list, count);
    if out.is_empty() {
        "<unset>".into()
    } else {
        out
    }
}

pub(super) fn slice_cells(v: &Value) -> Vec<Value> {
    let (name, age) = name_and_age(v);
    let ports: Vec<String> = items(&v["ports"])
        .iter()
        .map(|p| match (p["port"].as_i64(), p["name"].as_str()) {
            (Some(n), _) => n.to_string(),
            (None, Some(name)) => name.to_string(),
            (None, None) => "*".into(),
        })
        .collect();
    let addresses: Vec<String> = items(&v["endpoints"])
        .iter()
        .flat_map(|e| items(&e["addresses"]))
        .map(|a| a.as_str().unwrap_or("").to_string())
        .collect();
    vec![
        name,
        json!(s(v, "/addressType")),
        json!(or_unset(&ports, ports.len())),
        json!(or_unset(&addresses, addresses.len())),
        age,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_print_three_addresses_with_their_ports_and_how_many_more() {
        assert_eq!(format_endpoints(&json!({})), "<none>");
        let ep = json!({"subsets": [{
            "addresses": [{"ip": "10.0.0.1"}, {"ip": "10.0.0.2"}, {"ip": "fd00::3"}],
            "notReadyAddresses": [{"ip": "10.0.0.9"}],
            "ports": [{"port": 80}, {"port": 443}]}]});
        assert_eq!(
            format_endpoints(&ep),
            "10.0.0.1:80,10.0.0.2:80,[fd00::3]:80 + 3 more..."
        );
        let headless = json!({"subsets": [{"addresses": [{"ip": "10.0.0.1"}]}]});
        assert_eq!(format_endpoints(&headless), "10.0.0.1");
    }

    #[test]
    fn slices_print_their_type_ports_and_addresses() {
        let slice = json!({"metadata": {"name": "web-abc"}, "addressType": "IPv4",
            "ports": [{"name": "http", "port": 80}, {"name": "x"}],
            "endpoints": [{"addresses": ["10.0.0.1"]}, {"addresses": ["10.0.0.2"]}]});
        let cells = slice_cells(&slice);
        assert_eq!(
            cells[..4],
            [
                json!("web-abc"),
                json!("IPv4"),
                json!("80,x"),
                json!("10.0.0.1,10.0.0.2")
            ]
        );
        let empty = slice_cells(&json!({"addressType": "IPv4"}));
        assert_eq!(empty[2..4], [json!("<unset>"), json!("<unset>")]);
    }
}

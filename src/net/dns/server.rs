//! The request handler hickory-server calls for each question: names of the cluster
//! domain and the reverse names of the cluster's addresses from the [`Index`], the rest
//! through the [`Forwarder`].

use std::sync::Arc;

use hickory_server::net::runtime::Time;
use hickory_server::proto::op::{
    Edns, Header, HeaderCounts, Message, Metadata, OpCode, Query, ResponseCode,
};
use hickory_server::proto::rr::{DNSClass, LowerName, Name, Record, RecordType};
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo};
use hickory_server::zone_handler::MessageResponseBuilder;

use super::forward::Forwarder;
use super::index::{Answer, Index};
use crate::client::informer::Informer;

/// The largest UDP answer offered to clients that speak EDNS (the DNS flag day's size,
/// which no path fragments).
const MAX_UDP: u16 = 1232;
/// How many ExternalName Services an alias is followed through inside the cluster.
const MAX_ALIASES: usize = 8;

/// Answers DNS questions.
pub struct Handler {
    pub index: Arc<Index>,
    pub forwarder: Arc<Forwarder>,
    /// The informers the index is filled from: it answers once all have listed.
    pub informers: Arc<[Informer]>,
}

/// Sends a response with these sections.
async fn send<R: ResponseHandler>(
    handle: &mut R,
    builder: MessageResponseBuilder<'_>,
    metadata: Metadata,
    answers: &[Record],
    authorities: &[Record],
    additionals: &[Record],
) -> ResponseInfo {
    let response = builder.build(
        metadata,
        answers.iter(),
        authorities.iter(),
        std::iter::empty(),
        additionals.iter(),
    );
    match handle.send_response(response).await {
        Ok(info) => info,
        Err(e) => {
            tracing::debug!(error = %e, "could not send a DNS answer");
            let mut metadata = metadata;
            metadata.response_code = ResponseCode::ServFail;
            ResponseInfo::from(Header {
                metadata,
                counts: HeaderCounts::default(),
            })
        }
    }
}

impl Handler {
    /// Whether the index answers yet; it does once every informer has its first list.
    fn ready(&self) -> bool {
        if self.index.is_synced() {
            return true;
        }
        if self.informers.iter().all(Informer::has_synced) {
            self.index.set_synced();
            return true;
        }
        false
    }

    /// The records an alias to `target` leads to: the cluster's own, or the upstream's.
    async fn follow(&self, target: &Name, qtype: RecordType) -> Vec<Record> {
        let mut out = Vec::new();
        let mut target = target.clone();
        for _ in 0..MAX_ALIASES {
            let lower = LowerName::new(&target);
            if !self.index.is_zone_name(&lower) {
                out.extend(self.upstream_records(&target, qtype).await);
                return out;
            }
            match self.index.lookup(&lower, qtype) {
                Answer::Set(set) => out.extend(set.answers.iter().cloned()),
                Answer::Made(records) => out.extend(records),
                Answer::Alias(cname, next) => {
                    out.extend(cname.answers.iter().cloned());
                    target = next;
                    continue;
                }
                _ => {}
            }
            break;
        }
        out
    }

    /// The upstream's answer records for `name`, or none.
    async fn upstream_records(&self, name: &Name, qtype: RecordType) -> Vec<Record> {
        let question = vec![Query::query(name.clone(), qtype)];
        let mut query = Message::query();
        query.metadata.recursion_desired = true;
        query.queries = question.clone();
        let Ok(packet) = query.to_vec() else {
            return Vec::new();
        };
        match self.forwarder.exchange(&packet, &question).await {
            Some(answer) if answer.metadata.response_code == ResponseCode::NoError => {
                answer.answers
            }
            _ => Vec::new(),
        }
    }
}

#[async_trait::async_trait]
impl RequestHandler for Handler {
    async fn handle_request<R: ResponseHandler, T: Time>(
        &self,
        request: &Request,
        mut handle: R,
    ) -> ResponseInfo {
        let edns = request.edns.as_ref().map(|asked| {
            let mut edns = Edns::new();
            edns.set_max_payload(asked.max_payload().clamp(512, MAX_UDP));
            edns.set_version(0);
            edns
        });
        let builder = MessageResponseBuilder::new(&request.queries, edns.as_ref());
        let mut meta = Metadata::response_from_request(&request.metadata);
        meta.recursion_available = true;
        if request.metadata.op_code != OpCode::Query {
            meta.response_code = ResponseCode::NotImp;
            return send(&mut handle, builder, meta, &[], &[], &[]).await;
        }
        let Ok(info) = request.request_info() else {
            meta.response_code = ResponseCode::FormErr;
            return send(&mut handle, builder, meta, &[], &[], &[]).await;
        };
        let (qname, qtype) = (info.query.name(), info.query.query_type());
        let answer = match self.index.lookup(qname, qtype) {
            Answer::NotReady if self.ready() => self.index.lookup(qname, qtype),
            answer => answer,
        };
        if !matches!(answer, Answer::Elsewhere) {
            meta.authoritative = true;
            if info.query.query_class() != DNSClass::IN {
                meta.response_code = ResponseCode::Refused;
                return send(&mut handle, builder, meta, &[], &[], &[]).await;
            }
        }
        let soa = std::slice::from_ref(self.index.soa());
        match answer {
            Answer::Set(set) if set.answers.is_empty() => {
                send(&mut handle, builder, meta, &[], soa, &[]).await
            }
            Answer::Set(set) => {
                send(
                    &mut handle,
                    builder,
                    meta,
                    &set.answers,
                    &[],
                    &set.additionals,
                )
                .await
            }
            Answer::Made(records) => send(&mut handle, builder, meta, &records, &[], &[]).await,
            Answer::Alias(cname, target) => {
                let mut records = cname.answers.clone();
                if matches!(qtype, RecordType::A | RecordType::AAAA) {
                    records.extend(self.follow(&target, qtype).await);
                }
                send(&mut handle, builder, meta, &records, &[], &[]).await
            }
            Answer::NoData => send(&mut handle, builder, meta, &[], soa, &[]).await,
            Answer::NxDomain => {
                meta.response_code = ResponseCode::NXDomain;
                send(&mut handle, builder, meta, &[], soa, &[]).await
            }
            Answer::NotReady => {
                meta.response_code = ResponseCode::ServFail;
                send(&mut handle, builder, meta, &[], &[], &[]).await
            }
            Answer::Elsewhere => {
                let question = [info.query.original().clone()];
                match self.forwarder.exchange(request.as_slice(), &question).await {
                    Some(answer) => {
                        meta.response_code = answer.metadata.response_code;
                        meta.truncation = answer.metadata.truncation;
                        send(
                            &mut handle,
                            builder,
                            meta,
                            &answer.answers,
                            &answer.authorities,
                            &answer.additionals,
                        )
                        .await
                    }
                    None => {
                        meta.response_code = ResponseCode::ServFail;
                        send(&mut handle, builder, meta, &[], &[], &[]).await
                    }
                }
            }
        }
    }
}

//! relay_turn and the run's meters: a refused call does not go upstream and says why; a made
//! call is reported with its usage and cost.

use crate::streaming::{CallTarget, TurnOptions, relay_turn};
use async_trait::async_trait;
use elfgate_core::{
    BudgetHolder, BudgetRefusal, CallGrant, CallPlan, CallRefusal, CallReport,
    EngineSessionContext, ErrorCode, EventEmitter, EventHub, LedgerError, Message, MessageId,
    Meters, Metrics, ModelMeter, Payer, Prices, RunId, RunLedger, RunOutcome, RunRecorder, Session,
    SessionId, TokenUsage,
};
use elfgate_llm::{LlmError, LlmEvent, LlmFinishReason, LlmProvider, LlmRequest, LlmStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio_util::sync::CancellationToken;

struct NoLedger;

#[async_trait]
impl RunLedger for NoLedger {
    async fn run_started(
        &self,
        _: SessionId,
        _: RunId,
        _: Option<String>,
    ) -> Result<(), LedgerError> {
        Ok(())
    }
    async fn run_finished(
        &self,
        _: SessionId,
        _: RunId,
        _: &RunOutcome,
        _: Option<&Message>,
    ) -> Result<(), LedgerError> {
        Ok(())
    }
    async fn message_added(&self, _: &Message) -> Result<(), LedgerError> {
        Ok(())
    }
    async fn cli_session_id_set(&self, _: SessionId, _: &str) -> Result<(), LedgerError> {
        Ok(())
    }
}

/// Answers "hello" with 1000 prompt tokens (400 read from the cache) and 500 output tokens.
#[derive(Default)]
struct Answering {
    calls: AtomicUsize,
}

const USAGE: TokenUsage = TokenUsage {
    input_tokens: 1000,
    output_tokens: 500,
    cache_read_tokens: 400,
    cache_write_tokens: 0,
};

#[async_trait]
impl LlmProvider for Answering {
    fn kind(&self) -> elfgate_llm::ProviderKind {
        elfgate_llm::ProviderKind::Openai
    }
    fn default_model(&self) -> Option<&str> {
        None
    }
    async fn stream(&self, _: &LlmRequest) -> Result<LlmStream, LlmError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let events = vec![
            Ok(LlmEvent::TextDelta("hello".into())),
            Ok(LlmEvent::Usage(USAGE)),
            Ok(LlmEvent::Finish(LlmFinishReason::Stop)),
        ];
        Ok(Box::pin(futures_util::stream::iter(events)))
    }
}

/// Refuses the team `capped`, records what it is told of the others' calls.
#[derive(Default)]
struct TeamBudget {
    told: Mutex<Vec<(TokenUsage, CallReport)>>,
}

#[async_trait]
impl ModelMeter for TeamBudget {
    fn may_refuse(&self, payer: &Payer) -> bool {
        payer.team == "capped"
    }
    async fn before_call(&self, plan: &CallPlan) -> Result<CallGrant, CallRefusal> {
        if plan.payer.team == "capped" {
            return Err(CallRefusal::Budget(BudgetRefusal {
                budget_id: Some("b1".into()),
                scope: BudgetHolder::Team("capped".into()),
                limit_usd: 1.0,
                spent_usd: 1.0,
                period: None,
            }));
        }
        Ok(CallGrant::new(plan.estimate))
    }
    async fn after_call(&self, _: &CallPlan, grant: CallGrant, report: &CallReport) {
        let reserved = grant.take::<TokenUsage>().unwrap_or_default();
        self.told.lock().unwrap().push((reserved, *report));
    }
}

fn context(team: &str, meters: Meters) -> EngineSessionContext {
    let (log, _log_rx) = elfgate_core::log_channel(elfgate_core::LOG_QUEUE_EVENTS);
    let metrics = Arc::new(Metrics::default());
    let hub = EventHub::new(log, metrics.clone());
    let now = chrono::Utc::now();
    let session = Session {
        id: SessionId::new(),
        engine: elfgate_core::EngineType::Chat,
        title: None,
        provider_id: None,
        model: None,
        cli_backend: None,
        project_path: None,
        agent_id: None,
        system_prompt: None,
        permission_mode: None,
        engine_config: Default::default(),
        cli_session_id: None,
        created_at: now,
        updated_at: now,
        ownership: elfgate_core::Ownership::root(),
    };
    let run_id = RunId::new();
    let bus = hub.open(session.id, 0, elfgate_core::SEQ_RESERVE_BLOCK);
    EngineSessionContext {
        recorder: RunRecorder::new(Arc::new(NoLedger), session.id, run_id),
        session,
        run_id,
        prompt: "q".into(),
        is_resume: false,
        user_message_id: MessageId::new(),
        head_start: Default::default(),
        client_msg_id: None,
        parent_id: None,
        provider_id: None,
        model: None,
        system_prompt: None,
        thinking_level: None,
        project_path: None,
        agent_id: None,
        engine_config: Default::default(),
        permission_mode: None,
        cli_backend: None,
        attachments: Vec::new(),
        stored_input: None,
        permission_answers: Default::default(),
        events: EventEmitter::new(bus, run_id),
        cancel: CancellationToken::new(),
        metrics,
        tool_run: None,
        node: None,
        sandbox: None,
        channel: Default::default(),
        payer: Arc::new(Payer {
            key_id: Some("k1".into()),
            user: "u".into(),
            team: team.into(),
        }),
        meters,
        trace: None,
    }
}

const PRICES: Prices = Prices {
    input_usd_per_mtok: 2.0,
    output_usd_per_mtok: 8.0,
    cache_read_usd_per_mtok: Some(0.5),
    cache_write_usd_per_mtok: None,
};

async fn call(ctx: &EngineSessionContext, provider: &Answering) -> crate::streaming::TurnOutput {
    let req = LlmRequest {
        model: "m".into(),
        max_tokens: Some(300),
        messages: vec![elfgate_llm::LlmMessage {
            role: elfgate_core::Role::User,
            blocks: vec![elfgate_core::ContentBlock::text("What is in a.txt?")],
        }],
        ..Default::default()
    };
    let target = CallTarget {
        provider,
        name: "p",
        prices: Some(PRICES),
    };
    let opts = TurnOptions {
        relay_deltas: false,
        report_errors: false,
        ..TurnOptions::default()
    };
    let policy = elfgate_llm::RetryPolicy::default();
    relay_turn(target, &req, &policy, ctx, Instant::now(), opts, None).await
}

#[tokio::test]
async fn a_refused_call_does_not_go_upstream_and_says_why() {
    let meter = Arc::new(TeamBudget::default());
    let ctx = context("capped", Meters::new(vec![meter.clone()]));
    assert!(ctx.meters.may_refuse(&ctx.payer));
    let provider = Answering::default();
    let out = call(&ctx, &provider).await;
    assert_eq!(provider.calls.load(Ordering::SeqCst), 0);
    assert!(matches!(out.refused, Some(CallRefusal::Budget(_))));
    let error = out.error.expect("a refused call reports an error");
    assert_eq!(error.code, ErrorCode::BudgetExceeded);
    assert!(error.message.contains("team 'capped'"), "{}", error.message);
    assert!(out.no_retry);
    assert!(meter.told.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_made_call_is_reported_to_the_meters_with_its_usage_and_cost() {
    let meter = Arc::new(TeamBudget::default());
    let ctx = context("free", Meters::new(vec![meter.clone()]));
    let provider = Answering::default();
    let out = call(&ctx, &provider).await;
    assert_eq!(provider.calls.load(Ordering::SeqCst), 1);
    let want = (600.0 * 2.0 + 400.0 * 0.5 + 500.0 * 8.0) / 1_000_000.0;
    assert_eq!(out.cost_usd, Some(want));
    let told = meter.told.lock().unwrap().clone();
    assert_eq!(told.len(), 1);
    let (reserved, report) = told[0];
    // The reservation: the output limit, and the request's size for the input.
    assert_eq!(reserved.output_tokens, 300);
    assert!(reserved.input_tokens > 0);
    assert!(report.made);
    assert_eq!(report.usage, USAGE);
    assert_eq!(report.cost_usd, Some(want));
    assert!(!report.input_tokens_estimated && !report.output_tokens_estimated);
}

#[tokio::test]
async fn without_meters_a_call_still_has_its_cost() {
    let ctx = context("free", Meters::default());
    let out = call(&ctx, &Answering::default()).await;
    assert_eq!(out.usage, USAGE);
    assert!(out.cost_usd.is_some());
    assert!(out.refused.is_none());
}

"""Replaying sessions through the policy off line: session traces (`trace`, `trace_fields`;
`trace_export` from the store; `tracegen` generated), the backtest (`backtest`,
`backtest_report`), the admin page's what-if (`whatif`, `whatif_process`) and what
interrupts users (`interruptions`)."""

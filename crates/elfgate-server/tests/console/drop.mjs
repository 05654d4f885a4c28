// Scenario: the connection drops in the middle of a stream (the test cuts it under the page);
// the page reconnects with Last-Event-ID and the answer goes on without a gap or a repeat.
import { scenario, shot, signIn, startSession, text, watchStream } from './lib.mjs';

await scenario(async (page, seen) => {
  await signIn(page);
  const sessionId = await startSession(page, { provider: 'mock', model: process.env.MODEL, prompt: 'Keep going' });
  const steps = await watchStream(page);
  await page.waitForSelector('.run-footer [data-finish]');
  await shot(page, 'dropped');
  return {
    sessionId,
    steps,
    final: (await text(page, '.msg.assistant:not(.draft) .content')).trim(),
    events: seen.requests
      .filter((r) => r.url.endsWith(`/v1/sessions/${sessionId}/events`))
      .map((r) => ({ lastEventId: r.headers['last-event-id'] ?? null })),
    pageErrors: seen.pageErrors,
  };
});

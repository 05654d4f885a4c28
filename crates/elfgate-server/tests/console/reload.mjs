// Scenario: reload the page in the middle of a stream; the answer goes on from where it was.
import { scenario, shot, signIn, startSession, text, watchStream } from './lib.mjs';

await scenario(async (page, seen) => {
  await signIn(page);
  const sessionId = await startSession(page, { provider: 'mock', model: process.env.MODEL, prompt: 'Count' });
  const before = await watchStream(page, (t) => t.includes('tok9 '));
  const beforeReload = before[before.length - 1];
  const requestsBefore = seen.requests.length;
  await page.reload();
  await page.waitForSelector('.session-view');
  // The first text drawn after the reload, then every later one.
  const after = await watchStream(page, (_, steps) => {
    if (steps.length === 3) shot(page, 'reload-resumed').catch(() => {});
    return false;
  });
  await page.waitForSelector('.run-footer [data-finish]');
  await shot(page, 'reloaded');
  const events = seen.requests
    .slice(requestsBefore)
    .filter((r) => r.url.endsWith(`/v1/sessions/${sessionId}/events`))
    .map((r) => ({ lastEventId: r.headers['last-event-id'] ?? null }));
  return {
    sessionId,
    beforeReload,
    after,
    final: (await text(page, '.msg.assistant:not(.draft) .content')).trim(),
    askedForToken: (await page.locator('#token').count()) > 0,
    events,
    pageErrors: seen.pageErrors,
  };
});

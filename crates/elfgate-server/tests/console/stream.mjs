// Scenario: start a chat session through the form and watch the answer stream in.
import { scenario, shot, signIn, startSession, text, watchStream } from './lib.mjs';

await scenario(async (page, seen) => {
  await signIn(page);
  const sessionId = await startSession(page, {
    engine: 'chat',
    provider: 'mock',
    model: process.env.MODEL,
    prompt: 'Tell me a story',
  });
  const steps = await watchStream(page, (_, s) => {
    if (s.length === 5) shot(page, 'stream-growing').catch(() => {});
    return false;
  });
  await page.waitForSelector('.run-footer [data-finish]');
  await shot(page, 'stream-done');
  return {
    retries: await page.locator('.note.retry').allTextContents(),
    thinking: await page.$$eval('details.thinking', (ds) => ds.map((d) => ({ open: d.open, text: d.querySelector('.thinking-text').textContent }))),
    sessionId,
    steps,
    final: (await text(page, '.msg.assistant:not(.draft) .content .md')).trim(),
    finish: await page.locator('.run-footer [data-finish]').getAttribute('data-finish'),
    stats: await text(page, '.run-footer .stats'),
    status: await text(page, '.session-view .status'),
    pageErrors: seen.pageErrors,
  };
});

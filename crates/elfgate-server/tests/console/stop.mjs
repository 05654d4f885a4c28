// Scenario: Stop in the middle of a slow stream.
import { scenario, shot, signIn, startSession, text, watchStream } from './lib.mjs';

await scenario(async (page, seen) => {
  await signIn(page);
  const sessionId = await startSession(page, { provider: 'mock', model: process.env.MODEL, prompt: 'A long story' });
  const steps = await watchStream(page, (t) => t.includes('tok4 '));
  await page.getByRole('button', { name: 'Stop' }).click();
  await page.waitForSelector('.run-footer [data-finish="interrupted"]');
  await page.waitForSelector('.session-view .status[data-status="interrupted"]');
  await shot(page, 'stopped');
  // A phone-sized window: one column, nothing wider than the window.
  await page.setViewportSize({ width: 390, height: 800 });
  await page.waitForFunction(() => getComputedStyle(document.querySelector('.session-head')).flexDirection === 'column');
  const narrowOverflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  await shot(page, 'narrow');
  return {
    narrowOverflow,
    sessionId,
    before: steps[steps.length - 1],
    status: await text(page, '.session-view .status'),
    badge: await text(page, '.run-footer [data-finish]'),
    shown: (await text(page, '.msg.assistant:not(.draft) .content')).trim(),
    stopDisabled: await page.getByRole('button', { name: 'Stop' }).isDisabled(),
    pageErrors: seen.pageErrors,
  };
});

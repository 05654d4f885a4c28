// Scenario: a session whose title, prompt and answer carry markup. The page must show it as
// text and run none of it: no script runs, no image loads, no marker request leaves.
import { BASE, scenario, shot, signIn } from './lib.mjs';

await scenario(async (page, seen) => {
  await signIn(page);
  const item = page.locator(`.session-item[data-session="${process.env.SESSION}"]`);
  await item.waitFor();
  const listed = await item.locator('.session-link').textContent();
  await shot(page, 'xss-list');
  await item.locator('.session-link').click();
  await page.waitForSelector('.run-footer [data-finish]');
  await page.waitForSelector('.msg.assistant:not(.draft)');
  await shot(page, 'xss-session');
  const view = page.locator('.session-view');
  return {
    listed,
    title: await page.locator('.session-title').textContent(),
    prompt: await page.locator('.msg.user .content').first().textContent(),
    answer: await page.locator('.msg.assistant .content').first().textContent(),
    ran: await page.evaluate(() => window.xssRan ?? null),
    images: await view.locator('img').count(),
    scripts: await page.locator('main script, main iframe, main object').count(),
    handlers: await page.evaluate(() =>
      [...document.querySelectorAll('main *')].flatMap((e) => [...e.attributes].map((a) => a.name)).filter((n) => n.startsWith('on')),
    ),
    links: await view.locator('a').evaluateAll((as) => as.map((a) => a.getAttribute('href'))),
    markers: seen.requests.map((r) => r.url).filter((u) => u.includes('xss-marker') || new URL(u).pathname === '/x'),
    cspViolations: seen.console.filter((c) => c.includes('Content Security Policy')),
    pageErrors: seen.pageErrors,
    base: BASE,
  };
});

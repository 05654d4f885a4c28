// Scenario: a viewer's key (TOKEN). The page says who the key is, lists the team's session
// (SESSION, running), opens it and offers no Stop, no composer and no start form; the daemon
// refuses the viewer's interrupt anyway (403), and the page keeps the token when it does.
import { BASE, scenario, shot, signIn } from './lib.mjs';

await scenario(async (page, seen) => {
  const session = process.env.SESSION;
  await signIn(page);
  await page.waitForSelector(`.session-item[data-session="${session}"]`);
  await page.locator('#principal:not([hidden])').waitFor();
  const principal = await page.locator('#principal').textContent();
  const listed = await page.locator('.session-item').evaluateAll((items) => items.map((i) => i.dataset.session));
  const newSessionOffered = await page.getByRole('link', { name: 'New session' }).count();
  await page.locator(`.session-item[data-session="${session}"] .session-link`).click();
  await page.waitForSelector('.session-view .status[data-status="running"]');
  // The stream shows the run going on.
  await page.waitForSelector('.msg.draft .draft-text');
  await shot(page, 'viewer');
  const stopButtons = await page.locator('button.stop:visible').count();
  const composers = await page.locator('form.composer').count();
  const readOnly = await page.locator('.read-only').textContent();
  // What a Stop would send, from the page with its token: refused, and the page keeps going.
  const interrupt = await page.evaluate(async (sid) => {
    const resp = await fetch(`/v1/sessions/${encodeURIComponent(sid)}/interrupt`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${sessionStorage.getItem('elfgate.token')}`, 'Content-Type': 'application/json' },
      body: '{}',
    });
    return resp.status;
  }, session);
  const tokenKept = await page.evaluate(() => sessionStorage.getItem('elfgate.token') != null);
  // The start form, reached by its address, starts nothing for a viewer.
  await page.goto(`${BASE}/#/new`);
  await page.locator('.start .read-only').waitFor();
  const startForms = await page.locator('form.start').count();
  const status = await page.evaluate(async (sid) => {
    const resp = await fetch(`/v1/sessions/${encodeURIComponent(sid)}`, {
      headers: { Authorization: `Bearer ${sessionStorage.getItem('elfgate.token')}` },
    });
    return (await resp.json()).status;
  }, session);
  return { principal, listed, newSessionOffered, stopButtons, composers, readOnly, interrupt, tokenKept, startForms, status, pageErrors: seen.pageErrors };
});

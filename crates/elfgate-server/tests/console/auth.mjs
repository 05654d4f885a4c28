// Scenario: a daemon that wants its token. The page asks for it, refuses a wrong one, works
// with the right one, keeps it across a reload, and asks again when the daemon refuses it.
// With AUTH_OFF set (a daemon with auth = "none"), the page must not ask at all.
import { BASE, scenario, shot, signIn, startSession, watchStream } from './lib.mjs';

await scenario(async (page, seen) => {
  if (process.env.AUTH_OFF) {
    await page.goto(`${BASE}/`);
    // Untitled: listed by its first prompt, fetched after the list.
    await page.waitForFunction(() => {
      const link = document.querySelector('.session-link');
      return link && link.textContent !== '(no title)';
    });
    const asked = (await page.locator('#token').count()) > 0;
    const firstPage = await page.locator('.session-link').allTextContents();
    // The next page, then the search box over both.
    await page.getByRole('button', { name: 'Load more' }).click();
    await page.waitForFunction((n) => document.querySelectorAll('.session-item').length > n, firstPage.length);
    const all = await page.locator('.session-link').allTextContents();
    const moreShown = await page.getByRole('button', { name: 'Load more' }).isVisible();
    await page.getByLabel('Search').fill('session 7');
    const found = await page.locator('.session-link').allTextContents();
    await page.getByLabel('Search').fill('NO TOKEN');
    const foundByPrompt = await page.locator('.session-link').allTextContents();
    // The CLI backend is asked for only for the cli engine.
    await page.getByRole('link', { name: 'New session' }).first().click();
    const backend = page.getByLabel('CLI backend');
    await page.getByLabel('Engine').waitFor();
    const backendForChat = await backend.isVisible();
    await page.getByLabel('Engine').selectOption('cli');
    await backend.waitFor();
    const backendForCli = await backend.isVisible();
    return { asked, firstPage, all, moreShown, found, foundByPrompt, backendForChat, backendForCli, pageErrors: seen.pageErrors };
  }
  await page.goto(`${BASE}/`);
  const field = page.getByLabel('Bearer token');
  await field.waitFor();
  const listBeforeToken = await page.locator('.sessions-view').count();
  await shot(page, 'token');
  await field.fill('not-the-token');
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByText('The daemon refused this token.').waitFor();
  const stillAsking = await field.isVisible();
  await signIn(page);
  await page.waitForSelector('.session-item');
  const sessions = await page.locator('.session-link').allTextContents();
  const sessionId = await startSession(page, { provider: 'mock', model: 'mock:tokens=3', prompt: 'Hello' });
  await watchStream(page);
  await page.waitForSelector('.run-footer [data-finish]');
  const answer = (await page.locator('.msg.assistant .content').first().textContent()).trim();
  // A reload keeps the token (sessionStorage).
  await page.reload();
  await page.waitForSelector('.session-view .run-footer [data-finish]');
  const askedAfterReload = (await page.locator('#token').count()) > 0;
  // A token the daemon refuses brings the form back.
  await page.evaluate(() => sessionStorage.setItem('elfgate.token', 'stale'));
  await page.getByRole('link', { name: 'Sessions' }).click();
  await page.getByLabel('Bearer token').waitFor();
  const askedAgain = await page.getByText('The daemon refused the token: enter it again.').isVisible();
  return { listBeforeToken, stillAsking, sessions, sessionId, answer, askedAfterReload, askedAgain, pageErrors: seen.pageErrors };
});

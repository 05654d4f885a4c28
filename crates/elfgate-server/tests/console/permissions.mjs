// Scenario: a tinyelf session whose model calls tools; one permission prompt answered "Allow
// once", the next (after a second prompt from the composer) "Deny".
import { scenario, shot, signIn, startSession } from './lib.mjs';

const cards = (page) =>
  page.$$eval('.tool', (els) =>
    els.map((e) => ({
      id: e.dataset.tool,
      name: e.querySelector('.tool-name').textContent,
      status: e.querySelector('.tool-status').textContent,
      input: e.querySelector('.tool-input')?.textContent ?? null,
      output: e.querySelector('.tool-output pre').textContent,
    })),
  );

await scenario(async (page, seen) => {
  await signIn(page);
  const sessionId = await startSession(page, {
    engine: 'tinyelf',
    provider: 'mock',
    model: process.env.MODEL,
    projectPath: process.env.PROJECT,
    prompt: 'Write the file',
  });
  await page.getByRole('button', { name: 'Allow once' }).waitFor();
  const asked = await page.locator('.permission').first().textContent();
  await shot(page, 'permission-prompt');
  await page.getByRole('button', { name: 'Allow once' }).click();
  await page.waitForSelector('.tool[data-status="success"]');
  await page.waitForSelector('.run-footer [data-finish]');

  await page.getByLabel('Message', { exact: true }).fill('Now run a command');
  await page.getByRole('button', { name: 'Send' }).click();
  const pending = page.locator('.permission:not([data-decision])');
  await pending.getByRole('button', { name: 'Deny' }).waitFor();
  await pending.getByRole('button', { name: 'Deny' }).click();
  await page.waitForSelector('.tool[data-status="denied"]');
  await page.waitForFunction(() => document.querySelectorAll('.run-footer [data-finish]').length >= 2);
  await shot(page, 'tools', { fullPage: true });
  return {
    sessionId,
    asked,
    cards: await cards(page),
    permissions: await page.$$eval('.permission', (els) =>
      els.map((e) => ({ decision: e.dataset.decision ?? null, status: e.querySelector('.perm-status').textContent })),
    ),
    finishes: await page.$$eval('.run-footer [data-finish]', (els) => els.map((e) => e.dataset.finish)),
    pageErrors: seen.pageErrors,
  };
});

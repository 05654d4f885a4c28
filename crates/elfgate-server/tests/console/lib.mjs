// Shared by the console's browser scenarios: start Chromium (the system's, through
// playwright-core), sign in, start a session through the form, report observations as JSON.
// The Rust side (tests/console.rs) starts the daemon and asserts on what is reported here.
//
// Environment: BASE (the daemon's URL), TOKEN, CHROMIUM (its executable), BROWSER_DRIVER_DIR
// (where playwright-core is installed), SCREENSHOT_DIR, and what each scenario needs.

import { createRequire } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';

const env = process.env;
const require = createRequire(path.join(env.BROWSER_DRIVER_DIR, 'package.json'));
const { chromium } = require('playwright-core');

// A safety net only: every wait is for a condition on the page.
export const GUARD = 30_000;
export const BASE = env.BASE;

export async function open({ width = 1100, height = 780 } = {}) {
  const browser = await chromium.launch({
    executablePath: env.CHROMIUM,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
  });
  const context = await browser.newContext({ viewport: { width, height } });
  const page = await context.newPage();
  page.setDefaultTimeout(GUARD);
  const seen = { console: [], pageErrors: [], requests: [] };
  page.on('console', (m) => seen.console.push(`${m.type()}: ${m.text()}`));
  page.on('pageerror', (e) => seen.pageErrors.push(String(e)));
  page.on('request', (r) => seen.requests.push({ url: r.url(), method: r.method(), headers: r.headers() }));
  return { browser, page, seen };
}

/** Opens the console and enters the token in its form. */
export async function signIn(page, token = env.TOKEN) {
  await page.goto(`${BASE}/`);
  await page.getByLabel('Bearer token').fill(token);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.waitForSelector('.sessions-view');
}

/** Starts a session through the form; returns its id (from the address the page goes to). */
export async function startSession(page, { engine = 'chat', provider, model, prompt, projectPath, mode }) {
  await page.getByRole('link', { name: 'New session' }).first().click();
  await page.waitForSelector('form.start');
  await page.getByLabel('Engine').selectOption(engine);
  if (provider) await page.getByLabel('Provider').selectOption(provider);
  if (model) await page.getByLabel('Model').fill(model);
  if (projectPath) await page.getByLabel('Project directory').fill(projectPath);
  if (mode) await page.getByLabel('Permission mode').selectOption(mode);
  await page.getByLabel('First prompt').fill(prompt);
  await page.getByRole('button', { name: 'Start' }).click();
  await page.waitForSelector('.session-view');
  return decodeURIComponent(new URL(page.url()).hash.replace('#/s/', ''));
}

/**
 * The texts the streamed answer goes through, each time it grows, until the stored answer
 * replaces it (or `until` of the texts returns true).
 */
export async function watchStream(page, until = () => false) {
  const steps = [];
  let len = 0;
  for (;;) {
    const handle = await page.waitForFunction(
      (prev) => {
        const draft = document.querySelector('.msg.draft .draft-text');
        if (draft && draft.textContent.length > prev) return { text: draft.textContent };
        if (document.querySelector('.msg.assistant:not(.draft)')) return { done: true };
        return false;
      },
      len,
      { polling: 'raf', timeout: GUARD },
    );
    const v = await handle.jsonValue();
    if (v.done) return steps;
    steps.push(v.text);
    len = v.text.length;
    if (until(v.text, steps)) return steps;
  }
}

export async function shot(page, name, { fullPage = false } = {}) {
  fs.mkdirSync(env.SCREENSHOT_DIR, { recursive: true });
  await page.screenshot({ path: path.join(env.SCREENSHOT_DIR, `${name}.png`), fullPage });
}

export const text = (page, selector) => page.locator(selector).first().textContent();

/** Runs a scenario and prints its observations (or its failure) as one `RESULT:` line. */
export async function scenario(body) {
  const { browser, page, seen } = await open();
  let result;
  try {
    result = await body(page, seen);
  } catch (e) {
    await shot(page, `failed-${path.basename(process.argv[1], '.mjs')}`).catch(() => {});
    result = { error: String(e?.stack || e), console: seen.console, pageErrors: seen.pageErrors };
    process.exitCode = 1;
  } finally {
    await browser.close();
  }
  process.stdout.write(`RESULT:${JSON.stringify(result)}\n`);
}

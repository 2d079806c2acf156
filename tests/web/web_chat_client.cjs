// Drives the chat page of `m3 serve` in headless Chromium as a person would: enters the API key,
// sends a message and watches the reply stream in, attaches an image with the file picker, stops a
// long generation, reloads the page (the conversation is still there), and takes a screenshot.
// Env: M3_URL, M3_API_KEY, M3_IMAGE (a PNG), M3_SHOT (screenshot path), M3_NODE_MODULES,
// M3_CHROMIUM. Prints "ok - ..." / "FAIL - ..." lines and "web-chat: N passed, M failed".
'use strict';
const { chromium } = require(process.env.M3_NODE_MODULES + '/playwright-core');

let passed = 0, failed = 0;
function check(cond, what) {
  if (cond) passed++; else failed++;
  console.log((cond ? 'ok - ' : 'FAIL - ') + what);
}

(async () => {
  const browser = await chromium.launch({ executablePath: process.env.M3_CHROMIUM, args: ['--no-sandbox'] });
  const page = await browser.newPage({ viewport: { width: 1280, height: 1000 } });
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  try {
    const res = await page.goto(process.env.M3_URL);
    check(res.status() === 200 && (await page.title()) === 'm3.cpp chat', 'GET / serves the chat page without the API key');
    await page.waitForFunction(() => document.getElementById('model-info').textContent.includes('API key'));
    check(true, 'without the key the page asks for it');

    await page.click('#settings summary');
    await page.fill('#api-key', process.env.M3_API_KEY);
    await page.dispatchEvent('#api-key', 'change');
    await page.waitForFunction(() => document.getElementById('model-info').textContent.startsWith('model '));
    check(true, 'with the key the page names the served model');
    await page.selectOption('#thinking', 'enabled');
    // The first reply runs to its length (ignore_eos) so that it streams over many frames: the
    // page draws a streaming reply once per frame.
    const settings = async (pairs) => {
      for (const [id, v] of pairs) {
        await page.fill(id, v);
        await page.dispatchEvent(id, 'change');
      }
    };
    await settings([['#budget', '6'], ['#temperature', '0'], ['#max-tokens', '3000'], ['#extra', '{"ignore_eos": true}']]);

    // 1. A message, its reply streamed in: an observer counts the distinct partial answers the
    // page showed while the reply was still generating.
    await page.evaluate(() => {
      window.__partials = new Set();
      new MutationObserver(() => {
        const m = document.querySelector('.msg.assistant[data-state="streaming"]');
        const t = m && m.querySelector('.content').textContent;
        if (t) window.__partials.add(t);
      }).observe(document.getElementById('messages'), { childList: true, subtree: true });
    });
    await page.fill('#input', 'Hello there, who are you?');
    await page.click('#send');
    await page.waitForSelector('.msg.assistant[data-state="done"]', { timeout: 120000 });
    const partials = await page.evaluate(() => window.__partials.size);
    check(partials >= 2, 'the reply streams in (' + partials + ' partial answers shown while it was generating)');
    const first = await page.$eval('.msg.assistant', (m) => ({
      reasoning: !!m.querySelector('details.reasoning'), open: m.querySelector('details.reasoning')?.open,
      content: m.querySelector('.content').textContent }));
    check(first.reasoning && first.open === false, 'the reasoning is shown folded');
    check(first.content.length > 0, 'the answer follows the reasoning');

    // 2. An image by the file picker.
    await settings([['#max-tokens', '400'], ['#extra', '']]);
    await page.setInputFiles('#file', process.env.M3_IMAGE);
    await page.waitForSelector('#attachments .chip');
    await page.fill('#input', 'What is in this picture?');
    await page.click('#send');
    await page.waitForFunction(() => document.querySelectorAll('.msg.assistant[data-state="done"]').length === 2, null,
                               { timeout: 120000 });
    const img = await page.$eval('.msg.user:nth-of-type(3) img.thumb', (i) => i.src.slice(0, 22)).catch(() => '');
    check(img.startsWith('data:image/png;base64'), 'the attached image is shown in the message it went with');
    const second = await page.$eval('.msg.assistant:last-child', (m) => ({ state: m.dataset.state, error: m.querySelector('.error')?.textContent }));
    check(second.state === 'done' && !second.error, 'the server answered the message with the image (' + JSON.stringify(second) + ')');
    await page.screenshot({ path: process.env.M3_SHOT, fullPage: true });
    check(true, 'screenshot ' + process.env.M3_SHOT);

    // 3. Stop a long generation (ignore_eos through the extra request fields: the random model
    // could end its turn on its own).
    await page.fill('#extra', '{"ignore_eos": true}');
    await page.dispatchEvent('#extra', 'change');
    await page.fill('#max-tokens', '20000');
    await page.dispatchEvent('#max-tokens', 'change');
    await page.fill('#input', 'Think about this for a long time.');
    await page.click('#send');
    await page.waitForFunction(() => {
      const all = document.querySelectorAll('.msg.assistant');
      const m = all[all.length - 1];
      return all.length === 3 && m.dataset.state === 'streaming' && m.textContent.length > 40;
    }, null, { timeout: 60000 });
    check(await page.isEnabled('#stop'), 'the stop button is live while a reply streams');
    await page.click('#stop');
    await page.waitForSelector('.msg.assistant[data-state="stopped"]', { timeout: 30000 });
    check((await page.textContent('.msg.assistant:last-child')).includes('(stopped)') && await page.isEnabled('#send'),
          'stop ends the reply, marks it, and the page takes the next message');

    // The server goes on serving after the abort.
    await page.fill('#extra', '');
    await page.dispatchEvent('#extra', 'change');
    await page.fill('#max-tokens', '8');
    await page.dispatchEvent('#max-tokens', 'change');
    await page.fill('#budget', '2');
    await page.dispatchEvent('#budget', 'change');
    await page.fill('#input', 'One more.');
    await page.click('#send');
    await page.waitForFunction(() => {
      const all = document.querySelectorAll('.msg.assistant');
      return all.length === 4 && all[3].dataset.state === 'done';
    }, null, { timeout: 120000 });
    check(true, 'a message after the stop is answered');

    // 4. The conversation is kept in the browser.
    await page.reload();
    await page.waitForSelector('.msg.assistant');
    const kept = await page.$$eval('.msg', (ms) => ms.length);
    check(kept === 8, 'after a reload the conversation is still there (' + kept + ' messages)');
    check(errors.length === 0, 'no script errors (' + errors.join('; ') + ')');
  } catch (e) {
    check(false, 'unexpected: ' + (e && e.stack ? e.stack : e));
  } finally {
    await browser.close();
  }
  console.log(`web-chat: ${passed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
})();

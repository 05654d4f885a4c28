// A small Markdown renderer that builds DOM nodes from text. It never produces HTML to parse:
// markup in the text (<script>, <img onerror=…>) stays text. Links only to http(s) URLs; no
// images from text (an image in Markdown shows as its alt text and URL).
//
// Covered: paragraphs, headings (#), fenced code (```), inline code, **bold**, *emphasis*,
// [links](https://…), bullet and numbered lists, > quotes, --- rules.

import { h } from './dom.js';

/** The URL of a link, or null unless it is an absolute http(s) URL. */
export function safeHref(raw) {
  try {
    const u = new URL(raw.trim());
    return u.protocol === 'http:' || u.protocol === 'https:' ? u.href : null;
  } catch {
    return null;
  }
}

// Underscores count only at word edges: snake_case names stay as they are.
const INLINE = /(`+)([\s\S]*?[^`])\1(?!`)|\*\*([\s\S]+?)\*\*|(?<!\w)__([\s\S]+?)__(?!\w)|\*([^*\s][^*]*?)\*|(?<!\w)_([^_\s][^_]*?)_(?!\w)|(!?)\[([^\]]*)\]\(([^)\s]+)\)|(https?:\/\/[^\s<>()]+[^\s<>().,;:!?'"])/;

/** Inline Markdown of `text` as nodes. */
export function inline(text) {
  const out = [];
  let rest = text;
  while (rest) {
    const m = INLINE.exec(rest);
    if (!m) {
      out.push(rest);
      break;
    }
    if (m.index > 0) out.push(rest.slice(0, m.index));
    rest = rest.slice(m.index + m[0].length);
    if (m[1]) out.push(h('code', {}, m[2]));
    else if (m[3] != null || m[4] != null) out.push(h('strong', {}, inline(m[3] ?? m[4])));
    else if (m[5] != null || m[6] != null) out.push(h('em', {}, inline(m[5] ?? m[6])));
    else if (m[8] != null || m[9] != null) {
      const href = safeHref(m[9]);
      if (m[7] === '!' || !href) {
        // An image, or a link elsewhere than http(s): shown as the text it is.
        out.push(m[0]);
      } else {
        out.push(h('a', { href, rel: 'noopener noreferrer nofollow', target: '_blank' }, inline(m[8] || href)));
      }
    } else if (m[10]) {
      const href = safeHref(m[10]);
      out.push(href ? h('a', { href, rel: 'noopener noreferrer nofollow', target: '_blank' }, m[10]) : m[10]);
    }
  }
  return out;
}

const FENCE = /^\s{0,3}(```+|~~~+)\s*([\w+-]*)\s*$/;
const HEADING = /^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
const BULLET = /^\s{0,3}[-*+]\s+(.*)$/;
const NUMBERED = /^\s{0,3}\d{1,9}[.)]\s+(.*)$/;
const QUOTE = /^\s{0,3}>\s?(.*)$/;
const RULE = /^\s{0,3}([-*_])(\s*\1){2,}\s*$/;

/** Markdown `text` as a fragment of nodes. */
export function markdown(text) {
  const frag = document.createDocumentFragment();
  const lines = String(text).replace(/\r\n?/g, '\n').split('\n');
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (!line.trim()) {
      i++;
      continue;
    }
    const fence = FENCE.exec(line);
    if (fence) {
      const body = [];
      i++;
      while (i < lines.length && !lines[i].trim().startsWith(fence[1])) body.push(lines[i++]);
      i++;
      const code = h('code', fence[2] ? { 'data-lang': fence[2] } : {}, body.join('\n'));
      frag.append(h('pre', {}, code));
      continue;
    }
    const heading = HEADING.exec(line);
    if (heading) {
      frag.append(h(`h${Math.min(6, heading[1].length + 2)}`, {}, inline(heading[2])));
      i++;
      continue;
    }
    if (RULE.test(line)) {
      frag.append(h('hr'));
      i++;
      continue;
    }
    if (BULLET.test(line) || NUMBERED.test(line)) {
      const numbered = !BULLET.test(line);
      const re = numbered ? NUMBERED : BULLET;
      const list = h(numbered ? 'ol' : 'ul');
      while (i < lines.length && re.test(lines[i])) {
        const item = [re.exec(lines[i])[1]];
        i++;
        // Continuation lines: indented, not a new item.
        while (i < lines.length && /^\s{2,}\S/.test(lines[i]) && !re.test(lines[i])) item.push(lines[i++].trim());
        list.append(h('li', {}, inline(item.join('\n'))));
      }
      frag.append(list);
      continue;
    }
    if (QUOTE.test(line)) {
      const body = [];
      while (i < lines.length && QUOTE.test(lines[i])) body.push(QUOTE.exec(lines[i++])[1]);
      frag.append(h('blockquote', {}, markdown(body.join('\n'))));
      continue;
    }
    const para = [];
    while (
      i < lines.length &&
      lines[i].trim() &&
      !FENCE.test(lines[i]) &&
      !HEADING.test(lines[i]) &&
      !QUOTE.test(lines[i]) &&
      !BULLET.test(lines[i]) &&
      !NUMBERED.test(lines[i])
    ) {
      para.push(lines[i++]);
    }
    frag.append(h('p', {}, inline(para.join('\n'))));
  }
  return frag;
}

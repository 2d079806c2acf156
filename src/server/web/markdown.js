// A small Markdown renderer for the chat page: fenced code blocks, inline code, headings, lists,
// bold, italic, links and paragraphs. Safe by construction: every character of the text is
// HTML-escaped first and only the tags below are ever added, so a reply cannot inject markup.
// Written here instead of vendoring a library: the page is a few static files compiled into the
// binary, and this subset is what model replies use (docs/SERVER.md, "Chat page").
(function () {
  'use strict';

  function escapeHtml(s) {
    return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
  }

  // Inline markup on an already escaped line.
  function inline(s) {
    const codes = [];
    s = s.replace(/`([^`]+)`/g, function (_, c) {
      codes.push(c);
      return '\u0000' + (codes.length - 1) + '\u0000';
    });
    s = s.replace(/\*\*([^*]+)\*\*/g, '<strong>$1</strong>');
    s = s.replace(/(^|[^*])\*([^*\s][^*]*)\*/g, '$1<em>$2</em>');
    s = s.replace(/\[([^\]]+)\]\((https?:\/\/[^\s)]+)\)/g, '<a href="$2" target="_blank" rel="noopener noreferrer">$1</a>');
    return s.replace(/\u0000(\d+)\u0000/g, function (_, i) { return '<code>' + codes[Number(i)] + '</code>'; });
  }

  function renderMarkdown(text) {
    const lines = escapeHtml(text).split('\n');
    const out = [];
    let para = [];
    let list = null;  // 'ul' or 'ol'
    const flushPara = function () {
      if (para.length) out.push('<p>' + para.map(inline).join('<br>') + '</p>');
      para = [];
    };
    const closeList = function () {
      if (list) out.push('</' + list + '>');
      list = null;
    };
    for (let i = 0; i < lines.length; i++) {
      const line = lines[i];
      const fence = line.match(/^```\s*([\w+-]*)\s*$/);
      if (fence) {
        flushPara();
        closeList();
        const code = [];
        for (i++; i < lines.length && !/^```\s*$/.test(lines[i]); i++) code.push(lines[i]);
        const lang = fence[1] ? ' class="language-' + fence[1] + '"' : '';
        out.push('<pre><code' + lang + '>' + code.join('\n') + '</code></pre>');
        continue;
      }
      const heading = line.match(/^(#{1,6})\s+(.*)$/);
      const bullet = line.match(/^\s*[-*+]\s+(.*)$/);
      const numbered = line.match(/^\s*\d+[.)]\s+(.*)$/);
      if (heading) {
        flushPara();
        closeList();
        const n = heading[1].length;
        out.push('<h' + n + '>' + inline(heading[2]) + '</h' + n + '>');
      } else if (bullet || numbered) {
        flushPara();
        const kind = bullet ? 'ul' : 'ol';
        if (list !== kind) {
          closeList();
          out.push('<' + kind + '>');
          list = kind;
        }
        out.push('<li>' + inline((bullet || numbered)[1]) + '</li>');
      } else if (line.trim() === '') {
        flushPara();
        closeList();
      } else {
        closeList();
        para.push(line);
      }
    }
    flushPara();
    closeList();
    return out.join('');
  }

  window.renderMarkdown = renderMarkdown;
})();

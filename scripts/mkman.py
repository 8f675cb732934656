#!/usr/bin/env python3
"""mkman.py XMLDIR HEADER OUTDIR — section 3 man pages from doxygen's XML.

doxygen reads include/weft.h (docs/Doxyfile) and writes its comments as
XML; this script turns that into one page per public function and type
(weft_read.3, weft_mutex_t.3, ...) and an overview, weft.3 (the header's
conventions and every group with its functions). The SYNOPSIS of each page
is the declaration as the header writes it. Nothing is kept by hand: the
header is the only source.
"""
import os
import re
import sys
import xml.etree.ElementTree as ET

xmldir, header, outdir = sys.argv[1:4]
hdr_text = open(header, encoding="utf-8").read()
hdr_lines = hdr_text.split("\n")


def version():
    v = [re.search(r"#define WEFT_VERSION_%s (\d+)" % k, hdr_text).group(1)
         for k in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(v)


VERSION = version()


# ---- groff text ----------------------------------------------------------

def esc(s):
    """Escape plain text for groff."""
    return s.replace("\\", "\\e").replace("-", "\\-")


def line_start(s):
    """A line that groff must not take for a request (spaces kept)."""
    return "\\&" + s if s[:1] in (".", "'") else s


class Doc:
    """The parts of one doxygen description, as groff."""

    def __init__(self):
        self.paras = []     # DESCRIPTION paragraphs (each a groff chunk)
        self.params = []    # (names, text)
        self.returns = []   # paragraphs
        self.see = []
        self.notes = []     # (title, text)


def inline(el):
    """The inline content of @el (a para or part of one) as groff."""
    out = [esc(el.text or "")]
    for c in el:
        if c.tag in ("parameterlist", "simplesect", "verbatim",
                     "itemizedlist", "orderedlist", "programlisting"):
            pass  # block content: handled by blocks()
        elif c.tag == "computeroutput":
            out.append("\\fI" + esc("".join(c.itertext())) + "\\fP")
        elif c.tag in ("ref", "bold"):
            out.append("\\fB" + esc("".join(c.itertext())) + "\\fP")
        elif c.tag == "emphasis":
            out.append("\\fI" + esc("".join(c.itertext())) + "\\fP")
        elif c.tag == "ulink":
            out.append(esc("".join(c.itertext())) + " <" + esc(c.get("url", "")) + ">")
        elif c.tag == "linebreak":
            out.append("\n.br\n")
        else:
            out.append(inline(c))
        out.append(esc(c.tail or ""))
    return "".join(out)


def flow(s):
    """One paragraph's groff: whitespace collapsed, request-safe lines."""
    parts = [p for p in s.split("\n.br\n")]
    return "\n.br\n".join(line_start(re.sub(r"\s+", " ", p).strip()) for p in parts if p.strip())


def blocks(para, doc, sink):
    """Split a doxygen <para> into paragraphs and the sections it holds."""
    text = flow(inline(para))
    if text:
        sink.append(text)
    for c in para:
        if c.tag == "parameterlist" and c.get("kind") == "param":
            for item in c.findall("parameteritem"):
                names = [n.text or "" for n in item.iter("parametername")]
                desc = " ".join(flow(inline(p)) for p in item.find("parameterdescription").findall("para"))
                doc.params.append((names, desc))
        elif c.tag == "simplesect":
            kind = c.get("kind")
            paras = []
            for p in c.findall("para"):
                blocks(p, doc, paras)
            if kind == "return":
                doc.returns.extend(paras)
            elif kind == "see":
                doc.see.extend(paras)
            else:
                title = c.findtext("title") or kind.capitalize()
                doc.notes.append((title, paras))
        elif c.tag in ("verbatim", "programlisting"):
            text = c.text or "" if c.tag == "verbatim" else "\n".join(codeline(l) for l in c.findall("codeline"))
            body = "\n".join(line_start(esc(l)) if l.strip() else "" for l in text.strip("\n").split("\n"))
            sink.append(".nf\n" + body + "\n.fi")
        elif c.tag in ("itemizedlist", "orderedlist"):
            for li in c.findall("listitem"):
                sub = []
                for p in li.findall("para"):
                    blocks(p, doc, sub)
                sink.append(".IP \\(bu 2\n" + "\n.br\n".join(sub))


def codeline(el):
    """One line of a doxygen <programlisting>, spaces (<sp/>) restored."""
    out = []

    def walk(e):
        out.append(e.text or "")
        for c in e:
            if c.tag == "sp":
                out.append(" ")
            else:
                walk(c)
            out.append(c.tail or "")
    walk(el)
    return "".join(out)


def parse_doc(el):
    doc = Doc()
    if el is not None:
        for p in el.findall("para"):
            blocks(p, doc, doc.paras)
    return doc


def plain(el):
    return re.sub(r"\s+", " ", "".join(el.itertext())).strip() if el is not None else ""


# ---- the header's own declarations ----------------------------------------

def strip_doc_markup(text):
    # "/**< x   */" -> "/* x     */": the closing marks stay aligned.
    text = re.sub(r"/\*\*< (.*?)( *)\*/", lambda m: "/* " + m.group(1) + m.group(2) + " */", text)
    text = text.replace("/**<", "/* ").replace("/**", "/*")
    return re.sub(r"@p (\w)", r"\1", text)


def decl_of_function(name):
    for i, l in enumerate(hdr_lines):
        if re.match(r"^[a-z].*[ *]%s\(" % re.escape(name), l):
            j = i
            while not hdr_lines[j].rstrip().endswith(";"):
                j += 1
            return "\n".join(hdr_lines[i:j + 1])
    raise SystemExit("mkman: no declaration of %s in %s" % (name, header))


def decl_of_type(name):
    """The typedef of @name as the header writes it, with the #define
    initializers that follow it."""
    for i, l in enumerate(hdr_lines):
        if re.match(r"^\} %s;" % re.escape(name), l):
            j = i
            while not hdr_lines[j].startswith("typedef"):
                j -= 1
            k = i
            while k + 1 < len(hdr_lines) and hdr_lines[k + 1].startswith("#define WEFT_"):
                k += 1
            return strip_doc_markup("\n".join(hdr_lines[j:k + 1]))
        if re.match(r"^typedef [^{]*\b%s\b[^{]*;" % re.escape(name), l):
            return l
    raise SystemExit("mkman: no typedef of %s in %s" % (name, header))


# ---- collect ---------------------------------------------------------------

class Entry:
    def __init__(self, name, kind, brief, doc, group, line):
        self.name, self.kind, self.brief, self.doc = name, kind, brief, doc
        self.group, self.line = group, line


groups = {}      # id -> dict(title, doc, parent, members[], children[])
entries = {}     # name -> Entry
macros = []      # (group, name, brief, line)


def group_order(gid):
    m = re.search(r"@defgroup %s " % re.escape(gid), hdr_text)
    return m.start() if m else 1 << 30


index = ET.parse(os.path.join(xmldir, "index.xml")).getroot()
for comp in index.findall("compound"):
    if comp.get("kind") != "group":
        continue
    g = ET.parse(os.path.join(xmldir, comp.get("refid") + ".xml")).getroot().find("compounddef")
    gid = g.findtext("compoundname")
    groups[gid] = {"title": g.findtext("title"), "doc": parse_doc(g.find("detaileddescription")),
                   "brief": plain(g.find("briefdescription")),
                   "children": [ig.get("refid") for ig in g.findall("innergroup")],
                   "refid": comp.get("refid"), "members": []}
    for sec in g.findall("sectiondef"):
        for md in sec.findall("memberdef"):
            kind = md.get("kind")
            name = md.findtext("name")
            line = int(md.find("location").get("line", "0"))
            brief = plain(md.find("briefdescription"))
            if kind == "define":
                macros.append((gid, name, brief, line))
                continue
            if kind not in ("function", "typedef", "enum"):
                continue
            doc = parse_doc(md.find("detaileddescription"))
            entries[name] = Entry(name, "function" if kind == "function" else "type",
                                  brief, doc, gid, line)
            groups[gid]["members"].append(name)
    for ic in g.findall("innerclass"):
        c = ET.parse(os.path.join(xmldir, ic.get("refid") + ".xml")).getroot().find("compounddef")
        name = c.findtext("compoundname")
        line = int(c.find("location").get("line", "0"))
        doc = parse_doc(c.find("detaileddescription"))
        entries[name] = Entry(name, "type", plain(c.find("briefdescription")), doc, gid, line)
        groups[gid]["members"].append(name)

refid_to_gid = {g["refid"]: gid for gid, g in groups.items()}
parent = {}
for gid, g in groups.items():
    g["children"] = [refid_to_gid[r] for r in g["children"]]
    for c in g["children"]:
        parent[c] = gid
for g in groups.values():
    g["members"].sort(key=lambda n: (entries[n].kind != "type", entries[n].line))
macros.sort(key=lambda m: m[3])

filedef = ET.parse(os.path.join(xmldir, "weft_8h.xml")).getroot().find("compounddef")
file_brief = plain(filedef.find("briefdescription"))
file_doc = parse_doc(filedef.find("detaileddescription"))


# ---- write -------------------------------------------------------------------

def th(name):
    # .nh/.ad l: identifiers are neither hyphenated nor stretched apart.
    return '.TH "%s" 3 "" "weft %s" "weft manual"\n.nh\n.ad l\n' % (esc(name), VERSION)


def cap(chunk):
    """A sentence start: the brief "read up to ..." becomes "Read up to
    ..."; an identifier or a number stays as it is."""
    m = re.match(r"([a-z])([a-z]*)\b", chunk)
    return chunk[0].upper() + chunk[1:] if m and "_" not in chunk.split(" ")[0] else chunk


def name_line(name, brief):
    brief = brief.rstrip(".")
    return ".SH NAME\n%s \\- %s\n" % (esc(name), esc(brief))


def synopsis(decl):
    body = "\n".join(line_start(esc(l)) if l.strip() else "" for l in decl.split("\n"))
    return (".SH SYNOPSIS\n.nf\n.B #include <weft.h>\n.PP\n" + body + "\n.fi\n"
            ".PP\nLink with \\fB\\-lweft\\fP (\\fBpkg\\-config \\-\\-libs weft\\fP).\n")


def paras(chunks):
    return "".join(".PP\n" + c + "\n" for c in chunks)


THREAD_DEFAULT = ("Call it on the thread that owns the scheduler, objects and "
                  "descriptors involved: only functions documented as thread\\-safe "
                  "may be called from other threads (see \\fBweft\\fP(3), Threads).")


def see_also(e):
    names = ["weft"] + [n for n in groups[e.group]["members"] if n != e.name]
    return ".SH SEE ALSO\n" + ",\n".join(".BR %s (3)" % esc(n) for n in names) + "\n"


def page(e):
    d = e.doc
    out = [th(e.name), name_line(e.name, e.brief)]
    out.append(synopsis(decl_of_function(e.name) if e.kind == "function" else decl_of_type(e.name)))
    out.append(".SH DESCRIPTION\n" + paras([cap(line_start(esc(e.brief)))] + d.paras))
    if d.params:
        out.append(".SH ARGUMENTS\n")
        for names, text in d.params:
            out.append(".TP\n" + ", ".join("\\fI%s\\fP" % esc(n) for n in names) + "\n" + text + "\n")
    for title, chunks in d.notes:
        out.append(".SS %s\n" % esc(title) + paras(chunks))
    if d.returns:
        out.append(".SH RETURN VALUE\n" + paras([cap(d.returns[0])] + d.returns[1:]))
    if e.kind == "function":
        text = " ".join([e.brief] + [plain_groff(c) for c in d.paras + d.returns])
        if re.search(r"thread-safe|thread\\-safe", text, re.I):
            ts = "Thread\\-safe, as described above."
        else:
            ts = THREAD_DEFAULT
        out.append(".SH THREAD SAFETY\n" + ts + "\n")
    out.append(see_also(e))
    return "".join(out)


def plain_groff(s):
    return re.sub(r"\\f[BIPR]", "", s)


def overview():
    out = [th("weft"), name_line("weft", file_brief)]
    out.append(".SH SYNOPSIS\n.nf\n.B #include <weft.h>\n.fi\n.PP\n"
               "Compile and link with \\fBpkg\\-config \\-\\-cflags \\-\\-libs weft\\fP.\n")
    out.append(".SH DESCRIPTION\n" + paras(file_doc.paras))

    def emit(gid, depth):
        g = groups[gid]
        out.append((".SH %s\n" if depth == 0 else ".SS %s\n") % esc(g["title"].upper() if depth == 0 else g["title"]))
        out.append(paras(([line_start(esc(g["brief"]))] if g["brief"] else []) + g["doc"].paras))
        for gname, mname, brief, _ in macros:
            if gname == gid and brief:   # initializers: in their type's page
                out.append(".TP\n.B %s\n%s\n" % (esc(mname), line_start(esc(brief))))
        for n in g["members"]:
            out.append(".TP\n.BR %s (3)\n%s\n" % (esc(n), line_start(esc(entries[n].brief))))
        for c in sorted(g["children"], key=group_order):
            emit(c, depth + 1)

    for gid in sorted((g for g in groups if g not in parent), key=group_order):
        emit(gid, 0)
    out.append(".SH SEE ALSO\nThe header \\fI<weft.h>\\fP; the README and docs/ARCHITECTURE.md of weft.\n")
    return "".join(out)


os.makedirs(outdir, exist_ok=True)
for e in entries.values():
    with open(os.path.join(outdir, e.name + ".3"), "w", encoding="utf-8") as f:
        f.write(page(e))
with open(os.path.join(outdir, "weft.3"), "w", encoding="utf-8") as f:
    f.write(overview())
print("mkman: %d pages in %s" % (len(entries) + 1, outdir))

//! Retrieval quality on a small labelled handbook: for each labelled
//! question, the passage that answers it is among the first three, by
//! keyword and by hybrid ranking; graph search brings in a linked page
//! that the question's words miss; and the bindings a prompt sees.

use weft_retrieval::document::read;
use weft_retrieval::vectors::VectorSearch;
use weft_retrieval::{Chunking, Document, Knowledge, Mode, Request};

const HANDBOOK: &[(&str, &str)] = &[
    (
        "handbook/shipping.md",
        "# Shipping\n\nParcels leave our warehouse within two working days. \
         Tracking numbers are emailed once the courier collects the parcel.\n\n\
         ## Abroad\n\nInternational delivery takes five to ten days; customs duties are paid by the recipient.\n",
    ),
    (
        "handbook/returns.md",
        "# Returns\n\nUnused items may be sent back within thirty days of delivery. \
         Print the prepaid label from your orders page.\n\n\
         Once the item arrives, see [refunds](refunds.md) for when the money comes back.\n",
    ),
    (
        "handbook/refunds.md",
        "# Refunds\n\nMoney is credited to the original card within five banking days \
         after the warehouse inspects the item.\n",
    ),
    (
        "handbook/accounts.md",
        "# Accounts\n\nReset a forgotten password from the sign-in page; the reset link expires after one hour.\n\n\
         ## Two-factor\n\nAn authenticator app adds a second step to signing in.\n",
    ),
    (
        "handbook/warranty.md",
        "# Warranty\n\nEvery appliance carries a two-year warranty against manufacturing faults. \
         Claims need the serial number printed under the base.\n",
    ),
    (
        "handbook/payments.md",
        "# Payments\n\nWe accept debit and credit cards, bank transfers and vouchers. \
         Invoices are issued in euros.\n",
    ),
];

/// (question, the source that answers it)
const LABELLED: &[(&str, &str)] = &[
    (
        "How long does delivery abroad take?",
        "handbook/shipping.md",
    ),
    ("Can I send an unused item back?", "handbook/returns.md"),
    (
        "When is my money credited to my card?",
        "handbook/refunds.md",
    ),
    ("I forgot my password", "handbook/accounts.md"),
    (
        "Where is the serial number for a warranty claim?",
        "handbook/warranty.md",
    ),
    (
        "Which payment methods do you accept?",
        "handbook/payments.md",
    ),
    ("Who pays customs duties?", "handbook/shipping.md"),
];

/// A deterministic embedding: each word (lowercased, a plural's `s` cut)
/// hashed into one of 64 dimensions, then normalized, so that texts that
/// share words are near.
fn embed(text: &str) -> Vec<f32> {
    let mut vector = vec![0f32; 64];
    for word in text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.len() > 2)
    {
        let word = word.to_lowercase();
        let word = word.strip_suffix('s').unwrap_or(&word);
        let hash = word.bytes().fold(2166136261u32, |h, b| {
            (h ^ u32::from(b)).wrapping_mul(16777619)
        });
        vector[(hash % 64) as usize] += 1.0;
    }
    let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-6);
    vector.iter().map(|x| x / norm).collect()
}

fn documents() -> Vec<Document> {
    HANDBOOK
        .iter()
        .flat_map(|(path, text)| read(path, text.as_bytes()).expect("a document"))
        .collect()
}

fn knowledge() -> Knowledge {
    searched(None)
}

fn searched(search: Option<VectorSearch>) -> Knowledge {
    let knowledge = Knowledge::build(&documents(), &Chunking::default(), None).expect("built");
    let vectors = knowledge
        .chunks()
        .iter()
        .map(|c| embed(&format!("{} {}", c.heading, c.text)))
        .collect();
    knowledge
        .with_vectors(vectors, search)
        .expect("one vector per chunk")
}

fn sources_of(
    knowledge: &Knowledge,
    question: &str,
    mode: Mode,
    top_k: usize,
    hops: usize,
) -> Vec<String> {
    let query_vector = embed(question);
    let request = Request {
        query: question,
        query_vector: Some(&query_vector),
        mode,
        top_k,
        hops,
    };
    knowledge
        .retrieve(&request)
        .expect("retrieved")
        .iter()
        .map(|p| knowledge.chunks()[p.chunk].source.clone())
        .collect()
}

#[test]
fn each_labelled_question_finds_its_passage_in_the_top_three() {
    let knowledge = knowledge();
    assert_eq!(knowledge.vector_search(), Some(VectorSearch::Exact));
    let approximate = searched(Some(VectorSearch::Approximate));
    for (knowledge, mode) in [
        (&knowledge, Mode::Keyword),
        (&knowledge, Mode::Hybrid),
        (&approximate, Mode::Hybrid),
    ] {
        for (question, answer) in LABELLED {
            let found = sources_of(knowledge, question, mode, 3, 0);
            assert!(
                found.iter().any(|s| s == answer),
                "{mode:?} ({:?}): '{question}' found {found:?}, not {answer}",
                knowledge.vector_search()
            );
        }
    }
}

#[test]
fn graph_search_brings_in_a_linked_page_the_words_miss() {
    let knowledge = knowledge();
    // Only the returns page has these words; it links to the refunds page.
    let question = "prepaid label unused item";
    let alone = sources_of(&knowledge, question, Mode::Keyword, 1, 0);
    assert_eq!(alone, vec!["handbook/returns.md".to_owned()]);
    let linked = sources_of(&knowledge, question, Mode::Keyword, 1, 1);
    assert_eq!(
        linked,
        vec![
            "handbook/returns.md".to_owned(),
            "handbook/refunds.md".to_owned()
        ],
        "the refunds page follows the hit that links to it"
    );
}

#[test]
fn the_passages_are_numbered_for_the_prompt_and_listed_as_sources() {
    let knowledge = knowledge();
    let request = Request {
        query: "two-factor authenticator",
        query_vector: None,
        mode: Mode::Keyword,
        top_k: 1,
        hops: 0,
    };
    let passages = knowledge.retrieve(&request).expect("retrieved");
    assert_eq!(
        knowledge.context(&passages),
        "[1] handbook/accounts.md § Accounts › Two-factor\nAn authenticator app adds a second step to signing in."
    );
    let sources = knowledge.sources(&passages);
    assert_eq!(sources[0]["n"], 1);
    assert_eq!(sources[0]["source"], "handbook/accounts.md");
    assert_eq!(sources[0]["heading"], "Accounts › Two-factor");
    assert_eq!(sources[0]["chunk"], 1, "the second chunk of its page");
    assert!(sources[0]["score"].as_f64().unwrap() > 0.0);
    // Ranking by vectors without them, or without the query's, is
    // refused, named.
    let request = Request {
        mode: Mode::Hybrid,
        ..request
    };
    assert_eq!(
        knowledge.retrieve(&request).unwrap_err().to_string(),
        "mode 'hybrid' needs the query's embedding"
    );
    let words_only = Knowledge::build(&documents(), &Chunking::default(), None).expect("built");
    let vector = embed("two-factor");
    let request = Request {
        mode: Mode::Vector,
        query_vector: Some(&vector),
        ..request
    };
    assert_eq!(
        words_only.retrieve(&request).unwrap_err().to_string(),
        "mode 'vector' needs embeddings, and this knowledge base has none"
    );
}

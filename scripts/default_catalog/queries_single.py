"""Single-tool labelled queries: (query, [refs in call order]). All refs come from one tool."""

KG = "KeyGate Identity"
FL, HO, CA = "SkyRoute Flights", "StayFinder Hotels", "RideNow Car Rental"
PAY, STK, FX = "LedgerPay Payments", "MarketPulse Stocks", "FXRate Currency"
SKY, MET = "SkyCast Weather", "Meteora"
MD, PB, CH, SMS = "MailDrop Email", "PostBox Mail", "ChatterBox Messaging", "TextLine SMS"
SHOP, GRO = "ShopCart Store", "FreshBasket Grocery"
DRV, TSK, CAL, NOT = "CloudVault Drive", "TaskFlow Tasks", "PlanIt Calendar", "NoteNest Notes"
MUS, MOV, IMG = "TuneStream Music", "ReelBase Movies", "PixelForge Images"
GIT, CI = "CodeHub Repos", "BuildBot CI"
FIT, DOC = "FitTrack", "MediBook Appointments"
MAP, SPO, NEWS, LB, POLY = "WayFinder Maps", "ScoreBoard Live", "NewsWire", "LinguaBridge Translate", "Polyglot API"


def q(text, tool, *apis):
    return text, [f"{tool}/{a}" for a in apis]


QUERIES = [
    q("change my email address to maria.lopez@fastmail.com", KG, "login", "update_email"),
    q("I forgot my password — please send a reset link to dan.okafor@example.org", KG, "request_password_reset"),
    q("Turn on two-step verification for my account with an authenticator app; the app now shows 482913", KG,
      "login", "enable_two_factor", "verify_two_factor"),
    q("What name and phone number do you have on file for me? I'm jkim / hunter22", KG, "login", "get_profile"),
    q("Any non-stop flights from Boston to Lisbon on 12 May for two adults?", FL, "search_flights"),
    q("Cancel my flight reservation QX7P2L and get my money back", FL, "cancel_booking"),
    q("Check me in for booking ZK41MM with one suitcase and send me the boarding pass for my phone", FL, "check_in", "get_boarding_pass"),
    q("I'd like a window seat on reservation HT88QA", FL, "select_seat"),
    q("Which hotels in Kyoto have rooms from 3 to 6 April for under 150 dollars a night?", HO, "search_hotels"),
    q("Show me the most recent guest reviews of property H-20931", HO, "list_reviews"),
    q("I need an automatic SUV at Denver airport from Friday 10am until Monday 6pm", CA, "search_cars"),
    q("Keep the rental car two days longer — confirmation RN-55102, return it on the 14th at noon instead", CA, "extend_rental"),
    q("Refund charge ch_8812 in full, the customer was billed twice", PAY, "refund_payment"),
    q("How much money is sitting in our merchant account right now, and how much is still pending?", PAY, "get_balance"),
    q("What's Nvidia trading at at the moment?", STK, "search_symbol", "get_quote"),
    q("When does MSFT report next, and how did the last four quarters compare with estimates?", STK, "get_earnings"),
    q("Which stocks dropped the most on the NASDAQ today?", STK, "market_movers"),
    q("How many Japanese yen do I get for 250 euros today?", FX, "convert_currency"),
    q("Chart the pound against the US dollar from January to June 2024", FX, "historical_rates"),
    q("Will I need an umbrella in Manchester this afternoon?", MET, "get_hourly_outlook"),
    q("My hay fever is terrible — are grass and tree counts high in Vienna today?", MET, "pollen_report"),
    q("Is the air healthy to breathe at 40.7128, -74.0060 right now?", SKY, "air_quality"),
    q("Surf check: how big are the waves at Newquay and when is high tide?", MET, "marine_forecast"),
    q("Reply to the latest email in my MailDrop inbox saying I'll be there at 5", MD, "list_inbox", "reply_to_message"),
    q("Find the invoice Carla sent me last week and open it", MD, "search_messages", "read_message"),
    q("Set an out-of-office on my PostBox mailbox from 1 to 14 August saying I'm hiking with no signal", PB, "set_auto_reply"),
    q("Stop newsletters from @promo-blast.com getting into my PostBox", PB, "block_sender"),
    q("Create a private channel called launch-war-room and drop the rollout checklist in it", CH, "create_channel", "post_message"),
    q("Text +447700900123 that the plumber is running 20 minutes late", SMS, "send_sms"),
    q("Make sure this user really owns +15551234567: send them a code — they typed back 774201", SMS,
      "send_verification_code", "check_verification_code"),
    q("Add product P-55812 to my basket", SHOP, "create_cart", "add_item"),
    q("Where's my parcel for order 113-552?", SHOP, "track_order"),
    q("The headphones from order 88231 arrived broken, I want to send them back", SHOP, "request_return"),
    q("Which supermarkets can deliver to SW9 8LF?", GRO, "find_stores"),
    q("Upload contract.pdf from https://files.example.com/contract.pdf and give legal@acme.com read-only access", DRV,
      "upload_file", "share_file"),
    q("I need version 3 of file F-9921, the one before Sam's edits", DRV, "download_file"),
    q("New to-do in project PRJ-7: 'migrate billing DB', due Friday, urgent", TSK, "create_task"),
    q("Find a 45-minute slot when ana@x.com, li@x.com and I are all free and send them an invite for a sync", CAL,
      "find_free_slot", "create_event", "invite_attendees"),
    q("I can't make Thursday's budget review, decline it", CAL, "list_events", "respond_to_invite"),
    q("Jot down a shopping list: eggs, flour, butter, lemons", NOT, "create_note"),
    q("Play Bohemian Rhapsody on my speaker", MUS, "search_tracks", "play_track"),
    q("Where can I stream Oppenheimer in Germany?", MOV, "search_movies", "where_to_watch"),
    q("Cut the background out of this product photo: https://cdn.shop.example/mug.jpg", IMG, "upload_image", "remove_background"),
    q("Open a bug in acme/webapp: login button does nothing on Safari 17", GIT, "create_issue"),
    q("Why did build B-4471 go red? Show me what the failing step printed", CI, "get_build_status", "get_build_logs"),
    q("How did I sleep last night?", FIT, "sleep_summary"),
    q("Book me the first free appointment with a dermatologist in Austin, I have a rash", DOC,
      "search_doctors", "list_available_slots", "book_appointment"),
    q("Bike route from Alexanderplatz to Tempelhofer Feld please", MAP, "get_directions"),
    q("Pharmacies open now within 500 m of 48.8566, 2.3522", MAP, "nearby_search"),
    q("When do Boca Juniors play next?", SPO, "search_team", "team_fixtures"),
    q("Give me a three-bullet summary of today's top technology story", NEWS, "top_headlines", "summarize_article"),
    q("Translate this Word file into Japanese and tell me when it's ready: https://files.example.com/manual.docx", LB,
      "upload_document", "translate_document", "get_translation_job"),
    q("Write 'Москва' and 'Санкт-Петербург' in Latin letters", POLY, "transliterate"),
]
